#include "sdrt/core/distributed/internal/reshard_pack.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_reduce.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Copies every move of `message` between `buffer` and `locals`: into the locals when
// `to_local` (destination side), else into the buffer (source side).
absl::Status CopyMessage(const ReshardTensorPlan& tp, const ReshardMessage& message,
                         absl::Span<const Tensor> locals, const std::shared_ptr<Storage>& buffer,
                         int64_t offset, bool to_local, bool non_blocking, StreamHandle stream) {
  const std::string where =
      absl::StrCat("reshard of tensor '", tp.name, "', message from rank ", message.source_rank,
                   " to rank ", message.destination_rank);
  if (buffer == nullptr || offset < 0 || offset > buffer->nbytes() - message.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", message.bytes, " bytes at offset ",
                                                   offset, " do not fit the buffer of ",
                                                   buffer == nullptr ? 0 : buffer->nbytes()));
  }
  const std::vector<ReshardPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  int64_t at = offset;
  for (const ReshardMove& move : message.moves) {
    const int index = to_local ? move.destination : move.source;
    if (index < 0 || index >= static_cast<int>(pieces.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": no piece ", index));
    }
    const ReshardPiece& piece = pieces[index];
    if (piece.local >= static_cast<int>(locals.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": rank ", piece.rank, " gave ",
                                                     locals.size(), " locals, local ", piece.local,
                                                     " is needed"));
    }
    const Tensor& local = locals[piece.local];
    if (!local.defined() || local.dtype() != tp.dtype || local.shape() != piece.local_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": local ", piece.local, " of rank ", piece.rank, " is ",
                       local.defined() ? local.ToString() : "undefined", "; expected ",
                       DTypeName(tp.dtype), ShapeToString(piece.local_shape)));
    }
    IntVector shape(move.begin.size());
    for (size_t d = 0; d < shape.size(); ++d) shape[d] = move.end[d] - move.begin[d];
    SDRT_ASSIGN_OR_RETURN(const Tensor box, Tensor::AtByteOffset(buffer, at, tp.dtype, shape));
    const ShardRuns runs = ClipRuns(piece.runs, move.begin, move.end);
    if (to_local && message.contribution > 0) {
      // A later Partial contribution: what the local holds, combined with the box, back.
      if (!buffer->device().is_cpu()) {
        return absl::UnimplementedError(
            absl::StrCat(where, ": Partial contributions are reduced from CPU buffers only"));
      }
      SDRT_ASSIGN_OR_RETURN(const Tensor acc, Tensor::Empty(shape, tp.dtype));
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/false));
      SDRT_RETURN_IF_ERROR(ReduceInto(acc, box, tp.reduce_op()));
      if (tp.reduce_op() == ReduceOp::kAvg && message.contribution == tp.contributions() - 1) {
        // The last contribution of these elements: the sum becomes the mean.
        SDRT_RETURN_IF_ERROR(DivideBy(acc, tp.contributions()));
      }
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/true));
    } else {
      SDRT_RETURN_IF_ERROR(CopyRuns(box, move.begin, local, runs, to_local, non_blocking, stream));
    }
    at += move.bytes;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status PackMessage(const ReshardTensorPlan& tp, const ReshardMessage& message,
                         absl::Span<const Tensor> locals, const std::shared_ptr<Storage>& buffer,
                         int64_t offset, bool non_blocking, StreamHandle stream) {
  return CopyMessage(tp, message, locals, buffer, offset, /*to_local=*/false, non_blocking,
                     stream);
}

absl::Status UnpackMessage(const ReshardTensorPlan& tp, const ReshardMessage& message,
                           const std::shared_ptr<Storage>& buffer, int64_t offset,
                           absl::Span<const Tensor> locals, bool non_blocking,
                           StreamHandle stream) {
  return CopyMessage(tp, message, locals, buffer, offset, /*to_local=*/true, non_blocking,
                     stream);
}

}  // namespace sdrt::internal
