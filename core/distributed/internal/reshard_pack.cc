#include "sdrt/core/distributed/internal/reshard_pack.h"

#include <cstring>


#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_reduce.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The address of box [move.begin, move.end) in `local`, the CPU local of `piece`, when
// the piece is one run per dim and the box's elements are one dense range of `local` (in
// the box's row-major order); null otherwise, and for boxes outside the local (the general
// path checks and reports those). `elem`: the element's bytes (whole-byte dtypes only).
char* DenseHostBox(const ReshardPiece& piece, const ReshardMove& move, const Tensor& local,
                   int64_t elem) {
  const size_t n = move.begin.size();
  if (!local.device().is_cpu() || piece.runs.size() != n || local.dim() != n ||
      local.data_ptr() == nullptr) {
    return nullptr;
  }
  const IntSpan shape = local.shape();
  const IntSpan strides = local.strides();
  int64_t offset = 0;
  int64_t dense = 1;
  for (size_t d = n; d-- > 0;) {
    if (piece.runs[d].size() != 1) return nullptr;
    const IndexRun& r = piece.runs[d][0];
    const int64_t first = r.local + (move.begin[d] - r.global);
    const int64_t length = move.end[d] - move.begin[d];
    if (move.begin[d] < r.global || move.end[d] > r.global + r.length || first < 0 ||
        length < 0 || first + length > shape[d]) {
      return nullptr;
    }
    if (length != 1 && strides[d] != dense) return nullptr;
    offset += first * strides[d];
    dense *= length;
  }
  return static_cast<char*>(local.data_ptr()) + offset * elem;
}

// Copies every move of `message` between `buffer` and `locals`: into the locals when
// `to_local` (destination side), else into the buffer (source side).
absl::Status CopyMessage(const ReshardTensorPlan& tp, const ReshardMessage& message,
                         absl::Span<const Tensor> locals, const std::shared_ptr<Storage>& buffer,
                         int64_t offset, bool to_local, bool non_blocking, StreamHandle stream) {
  // The text of an error only: a message of many small tensors is copied per call.
  const auto where = [&] {
    return absl::StrCat("reshard of tensor '", tp.name, "', message from rank ",
                        message.source_rank, " to rank ", message.destination_rank);
  };
  if (buffer == nullptr || offset < 0 || offset > buffer->nbytes() - message.bytes) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": ", message.bytes,
                                                   " bytes at offset ", offset,
                                                   " do not fit the buffer of ",
                                                   buffer == nullptr ? 0 : buffer->nbytes()));
  }
  const std::vector<ReshardPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  const bool host_buffer = buffer->device().is_cpu() && ElementBits(tp.dtype) % 8 == 0;
  int64_t at = offset;
  IntVector shape;
  for (const ReshardMove& move : message.moves) {
    const int index = to_local ? move.destination : move.source;
    if (index < 0 || index >= static_cast<int>(pieces.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": no piece ", index));
    }
    const ReshardPiece& piece = pieces[index];
    if (piece.local >= static_cast<int>(locals.size())) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": rank ", piece.rank, " gave ",
                                                     locals.size(), " locals, local ", piece.local,
                                                     " is needed"));
    }
    const Tensor& local = locals[piece.local];
    if (!local.defined() || local.dtype() != tp.dtype || local.shape() != piece.local_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": local ", piece.local, " of rank ", piece.rank, " is ",
                       local.defined() ? local.ToString() : "undefined", "; expected ",
                       DTypeName(tp.dtype), ShapeToString(piece.local_shape)));
    }
    const bool host = host_buffer && local.device().is_cpu();
    if (!(to_local && message.contribution > 0) && host && move.bytes > 0) {
      // The common box (a Shard or Replicate piece of a dense local): one memcpy.
      if (char* const mine = DenseHostBox(piece, move, local, ElementBits(tp.dtype) / 8)) {
        char* const slot = static_cast<char*>(buffer->data()) + at;
        std::memcpy(to_local ? mine : slot, to_local ? slot : mine,
                    static_cast<size_t>(move.bytes));
        at += move.bytes;
        continue;
      }
    }
    shape.resize(move.begin.size());
    for (size_t d = 0; d < shape.size(); ++d) shape[d] = move.end[d] - move.begin[d];
    const ShardRuns runs = ClipRuns(piece.runs, move.begin, move.end);
    if (to_local && message.contribution > 0) {
      // A later Partial contribution: what the local holds, combined with the box, back.
      if (!buffer->device().is_cpu()) {
        return absl::UnimplementedError(
            absl::StrCat(where(), ": Partial contributions are reduced from CPU buffers only"));
      }
      SDRT_ASSIGN_OR_RETURN(const Tensor box, Tensor::AtByteOffset(buffer, at, tp.dtype, shape));
      SDRT_ASSIGN_OR_RETURN(const Tensor acc, Tensor::Empty(shape, tp.dtype));
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/false));
      SDRT_RETURN_IF_ERROR(ReduceInto(acc, box, tp.reduce_op()));
      if (tp.reduce_op() == ReduceOp::kAvg && message.contribution == tp.contributions() - 1) {
        // The last contribution of these elements: the sum becomes the mean.
        SDRT_RETURN_IF_ERROR(DivideBy(acc, tp.contributions()));
      }
      SDRT_RETURN_IF_ERROR(CopyRuns(acc, move.begin, local, runs, /*to_local=*/true));
    } else if (host) {
      // Host to host: the box is a span of the buffer, no tensor made for it.
      const PackedBlock box{static_cast<char*>(buffer->data()) + at, shape};
      SDRT_RETURN_IF_ERROR(CopyRuns(box, move.begin, local, runs, to_local));
    } else {
      SDRT_ASSIGN_OR_RETURN(const Tensor box, Tensor::AtByteOffset(buffer, at, tp.dtype, shape));
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

char* DirectRange(const ReshardTensorPlan& tp, const ReshardMessage& message,
                  absl::Span<const Tensor> locals, bool to_local) {
  if (message.moves.size() != 1 || message.contribution > 0 || IsSubByte(tp.dtype) ||
      message.bytes < kDirectRangeBytes) {
    return nullptr;
  }
  const ReshardMove& move = message.moves[0];
  const std::vector<ReshardPiece>& pieces =
      to_local || message.forward ? tp.destination() : tp.source();
  const int index = to_local ? move.destination : move.source;
  if (index < 0 || index >= static_cast<int>(pieces.size())) return nullptr;
  const ReshardPiece& piece = pieces[index];
  if (piece.local >= static_cast<int>(locals.size())) return nullptr;
  const Tensor& local = locals[piece.local];
  if (!local.defined() || local.dtype() != tp.dtype || local.shape() != piece.local_shape) {
    return nullptr;
  }
  return DenseHostBox(piece, move, local, ElementBits(tp.dtype) / 8);
}

bool CopyMessageDirect(const ReshardTensorPlan& tp, const ReshardMessage& message,
                       absl::Span<const Tensor> from, absl::Span<const Tensor> to) {
  if (message.contribution > 0 || IsSubByte(tp.dtype)) return false;
  const int64_t elem = ElementBits(tp.dtype) / 8;
  const std::vector<ReshardPiece>& sources = message.forward ? tp.destination() : tp.source();
  const std::vector<ReshardPiece>& destinations = tp.destination();
  // Every box's two addresses first: nothing is copied unless every box goes directly.
  absl::InlinedVector<std::pair<const char*, char*>, 4> boxes;
  for (const ReshardMove& move : message.moves) {
    if (move.source < 0 || move.source >= static_cast<int>(sources.size()) ||
        move.destination < 0 || move.destination >= static_cast<int>(destinations.size())) {
      return false;
    }
    const ReshardPiece& s = sources[move.source];
    const ReshardPiece& d = destinations[move.destination];
    if (s.local >= static_cast<int>(from.size()) || d.local >= static_cast<int>(to.size())) {
      return false;
    }
    const Tensor& src = from[s.local];
    const Tensor& dst = to[d.local];
    if (!src.defined() || !dst.defined() || src.dtype() != tp.dtype || dst.dtype() != tp.dtype ||
        src.shape() != s.local_shape || dst.shape() != d.local_shape) {
      return false;
    }
    const char* const a = move.bytes > 0 ? DenseHostBox(s, move, src, elem) : nullptr;
    char* const b = move.bytes > 0 ? DenseHostBox(d, move, dst, elem) : nullptr;
    if (move.bytes > 0 && (a == nullptr || b == nullptr)) return false;
    boxes.emplace_back(a, b);
  }
  // A box written before a later box is read must not overlap it (a source and a
  // destination local may share memory); the buffer path copes with that.
  for (size_t i = 0; i < boxes.size(); ++i) {
    const size_t bi = static_cast<size_t>(message.moves[i].bytes);
    for (size_t j = i + 1; j < boxes.size(); ++j) {
      const size_t bj = static_cast<size_t>(message.moves[j].bytes);
      if (bi > 0 && bj > 0 && boxes[i].second < boxes[j].first + bj &&
          boxes[j].first < boxes[i].second + bi) {
        return false;
      }
    }
  }
  for (size_t i = 0; i < boxes.size(); ++i) {
    // memmove: a box's source and destination may share memory (an in-place reshard).
    if (message.moves[i].bytes > 0) {
      std::memmove(boxes[i].second, boxes[i].first, static_cast<size_t>(message.moves[i].bytes));
    }
  }
  return true;
}

}  // namespace sdrt::internal
