// The planner of sdrt's one transfer engine: from compact descriptors alone (per tensor its
// name, dtype, global shape and the source and destination layouts), which boxes of which
// tensor go from which source rank to which destination rank. Pure arithmetic, the same on
// every rank for the same descriptors; nothing is sent and no communicator is involved.
// Every verb that moves tensor bytes between ranks describes its move in these terms:
// a reshard (any layout to any layout), a gather (into the full tensor on the ranks that
// keep it), a broadcast (from sources the root holds alone), a distribute (from full
// tensors every rank holds), loading a sharded folder (from rank files). The schedule
// (schedule.h) and the program (program.h) run a plan; the one-process simulator of the
// tests runs it with the packing of pack.h. Not public API.
//
// Method. Each piece of a layout (a rank's DTensor local, or one ShardedTensor box) owns
// a product of per-dim runs of global indices (region_copy.h's ShardRuns). Per dim, the
// sorted cut points of every source and destination run give the common refinement: a
// grid of cells each of which lies inside or outside any piece. Each source piece lists
// itself on the cells it covers; each destination piece walks the cells it covers and
// takes each one from
//   * itself, when a source piece on its own rank holds the cell (no wire bytes);
//   * the one holder, when there is one;
//   * else all k holders: the cell is cut into k / gcd(k, R) slabs, R the destination
//     pieces of the piece's box (its replicas, which need the cell alike), along its
//     largest dim (never inside a byte of a sub-byte dtype), the largest slab going to the
//     holder that has sent least so far in this tensor (ties: piece order): one slab per
//     holder for a lone piece, the whole cell in turn when R is a multiple of k. So
//     replicated sources share the load in as few messages as a box's replicas allow, and
//     the choice depends on nothing but the tensor's own layouts.
// A Partial source holds C contributions (C = the product of its Partial mesh dims' sizes;
// a piece's contribution is its coordinate on those dims, row-major): every destination
// piece takes each cell once per contribution, each contribution by the rule above among
// the pieces that hold it, and reduces them (reduce.h); Partial(avg) sums them and
// divides by C with the last contribution (PyTorch divides once per Partial mesh dim: the
// same bits when each mean is exact, as for sums of small integers). A Partial
// destination follows DistributeTensor's rule (tensor/sharding/distribute.h): a piece off
// coordinate 0 of a sum or product mesh dim takes nothing (TransferPiece::identity: the verb
// fills it with the reduction's identity), every other piece takes the value.
// Moves with the same (source piece, destination piece) are then merged along every dim
// where they are adjacent and agree elsewhere, so messages stay large. The work is
// proportional to the cells the pieces cover (no all-pairs scan of ranks); the geometry is
// made once per box (the replicas of a mesh layout share one: SideOutline), each
// box's runs, cover, cells and slab cuts, and each piece of it only chooses its senders.
// It is done once per distinct (dtype, shape, source layout, destination layout) of a
// plan: tensors that repeat one (every layer of a model) share its TransferLayoutPlan, so a
// plan of 100,000 tensors over 512 ranks costs a hash lookup per tensor after its first
// few layouts. A plan of one rank (TransferPlanOptions::rank) keeps only that rank's messages.
// Node-aware fan-out (TransferPlanOptions::node_of_rank) sends a cell once to each node
// that needs it and forwards it there, the node's pieces that need it each relaying a
// block of it (split.h's FanOutCell).
//
// Collectives. When every rank of the world needs the whole tensor (a destination that is
// the full tensor on each of TransferPlanOptions::world_size ranks) the move is one a
// collective does well, and the plan says so instead of listing point-to-point messages
// (when the options allow that kind): a broadcast when one rank holds the whole tensor and
// no other rank holds any of it (a message from that root to kEveryRank), an all-gather
// otherwise (one message per rank that holds a cell first in piece order, to kEveryRank).
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_H_

#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Plans every tensor. Errors, each naming the tensor: InvalidArgument for more than
// kMaxTransferDims dims, a negative dim, an element count or byte count that overflows,
// a layout with both a mesh and boxes, the errors of
// ComputeLocalShapeAndGlobalOffset, a rank outside [0, kMaxMeshRanks) (the schedule keeps
// arrays by rank), more than
// kMaxTransferBoxes boxes, a box of the wrong rank or outside the tensor, a
// _StridedShard dim whose size times the mesh's ranks exceeds kMaxStridedIndices, a sub-byte layout
// cut inside a byte (byte_cuts.h), more than max_cells cells, elements a destination piece
// needs that no source piece holds (unless allow_uncovered), and a Partial source of a dtype
// ReduceInto cannot combine (Partial(avg) of a non-floating dtype); Unimplemented for Partial mesh
// dims with different ops (on either side).
absl::StatusOr<TransferPlan> PlanTransfer(std::vector<TransferTensor> tensors,
                                          const TransferPlanOptions& options = {});

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_H_
