// CopiesToSelfDirectly and CopyToSelf (self_copy.h).
#include "sdrt/core/distributed/internal/engine/self_copy.h"

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The pieces that send the moves of `message`: the destination pieces for a forward (a
// relay sends what it holds), else the source pieces.
const std::vector<TransferPiece>& Senders(const TransferTensorPlan& tp,
                                          const TransferMessage& message) {
  return message.forward ? tp.destination() : tp.source();
}

// The local of `piece` among `locals`, checked against it (dtype and shape); null when it
// is missing or does not match.
const Tensor* LocalOf(const TransferPiece& piece, LocalRefs locals, DType dtype) {
  if (piece.local < 0 || piece.local >= static_cast<int>(locals.size())) return nullptr;
  const Tensor* const local = locals[piece.local].tensor;
  if (local == nullptr || !local->defined() || local->dtype() != dtype ||
      local->shape() != piece.local_shape) {
    return nullptr;
  }
  return local;
}

}  // namespace

bool CopiesToSelfDirectly(const TransferTensorPlan& tp, const TransferMessage& message,
                          LocalRefs from, LocalRefs to, Device device) {
  if (message.contribution != 0 || tp.cast.has_value() || ElementBits(tp.dtype) % 8 != 0) {
    return false;
  }
  const std::vector<TransferPiece>& senders = Senders(tp, message);
  const std::vector<TransferPiece>& receivers = tp.destination();
  for (const TransferMove& move : message.moves) {
    if (move.source < 0 || move.source >= static_cast<int>(senders.size()) ||
        move.destination < 0 || move.destination >= static_cast<int>(receivers.size())) {
      return false;
    }
    const Tensor* const source = LocalOf(senders[move.source], from, tp.dtype);
    const Tensor* const destination = LocalOf(receivers[move.destination], to, tp.dtype);
    if (source == nullptr || destination == nullptr || source->device() != device ||
        destination->device() != device) {
      return false;
    }
    const ShardRuns runs = ClipRuns(senders[move.source].runs, move.begin, move.end);
    for (size_t d = 0; d < runs.size(); ++d) {
      if (runs[d].size() != 1 || runs[d][0].length != move.end[d] - move.begin[d]) return false;
    }
  }
  return true;
}

absl::Status CopyToSelf(const TransferTensorPlan& tp, const TransferMessage& message,
                        LocalRefs from, LocalRefs to, bool non_blocking, StreamHandle stream) {
  const std::vector<TransferPiece>& senders = Senders(tp, message);
  const std::vector<TransferPiece>& receivers = tp.destination();
  for (const TransferMove& move : message.moves) {
    const bool indexed = move.source >= 0 && move.source < static_cast<int>(senders.size()) &&
                         move.destination >= 0 &&
                         move.destination < static_cast<int>(receivers.size());
    const Tensor* const source = indexed ? LocalOf(senders[move.source], from, tp.dtype) : nullptr;
    const Tensor* const destination =
        indexed ? LocalOf(receivers[move.destination], to, tp.dtype) : nullptr;
    if (source == nullptr || destination == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshard of tensor '", tp.name, "': rank ", message.source_rank,
                       " lacks the ", source == nullptr ? "sending" : "destination",
                       " local of a box it copies to itself (", DTypeName(tp.dtype), ")"));
    }
    // The box as a view of the sending local: its one run per dim, narrowed.
    const ShardRuns runs = ClipRuns(senders[move.source].runs, move.begin, move.end);
    Tensor box = *source;
    for (size_t d = 0; d < runs.size(); ++d) {
      if (runs[d].size() != 1 || runs[d][0].length != move.end[d] - move.begin[d]) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshard of tensor '", tp.name, "': a box copied to itself is not "
                         "one run of its sending piece on dim ", d));
      }
      SDRT_ASSIGN_OR_RETURN(box, box.Narrow(static_cast<int>(d), runs[d][0].local,
                                            runs[d][0].length));
    }
    SDRT_RETURN_IF_ERROR(CopyRuns(box, move.begin, *destination,
                                  ClipRuns(receivers[move.destination].runs, move.begin, move.end),
                                  /*to_local=*/true, non_blocking, stream));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
