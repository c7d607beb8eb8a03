// The collective half of the transfer planner (plan.h, "Collectives"): a tensor that every
// rank of the communicator needs whole moves by one broadcast or one all-gather, so that
// NCCL keeps its rings and MPI its tuned collectives, instead of by point-to-point
// messages. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_COLLECTIVE_PLAN_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_COLLECTIVE_PLAN_H_

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Plans `tensor`, of pieces `source` and `destination`, as a collective when the options allow one
// and the layout is one: options.world_size > 1, no Partial source, and a destination that is the
// whole tensor on each of ranks 0 .. world_size - 1 (one piece each). Then:
//   * kBroadcast (options.broadcast) when the source pieces holding elements are all on one
//     rank, the root, and one of them is the whole tensor: one message from the root;
//   * else kAllGather (options.all_gather): each cell of the common refinement is sent by
//     the first source piece that holds it (piece order: for a DTensor, the rank at
//     coordinate 0 of its Replicate mesh dims), its moves merged; one message per sending
//     rank.
// Every message goes to kEveryRank and is kept whatever options.rank is (every rank takes
// part in a collective). Fills tp.collective, tp.root, tp.messages, tp.stats, tp.sent and
// tp.received (a message counts once per receiving rank) and returns true; returns false,
// leaving `tp` unchanged, when no collective applies. Errors: InvalidArgument naming the
// tensor for elements no source holds (unless tensor.allow_uncovered), too many cells
// (options.max_cells), byte counts that overflow.
absl::StatusOr<bool> PlanCollective(const TransferTensor& tensor,
                                    const TransferPlanOptions& options, const SideOutline& source,
                                    const SideOutline& destination, TransferLayoutPlan& tp);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_COLLECTIVE_PLAN_H_
