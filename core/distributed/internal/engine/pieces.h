// The pieces of one side of a reshard (plan.h): each rank's owned runs under a
// DTensor layout or a list of ShardedTensor boxes, validated against hostile
// descriptors. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Fills `plan` (the pieces of both sides, the Partial contributions and their op) from
// `tensor`: one piece per mesh rank in mesh order, or one per box in box order (local = how
// many earlier boxes share its rank). Empty pieces are kept (they have no runs on some dim).
// Checks the tensor's dims, element and byte counts and, for sub-byte dtypes, that no piece
// is cut inside a byte. Errors as PlanTransfer's, naming the tensor and the side.
absl::Status LayoutPieces(const TransferTensor& tensor, TransferLayoutPlan& plan);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_
