// The values of sdrt's one transfer engine: a tensor's source and destination layouts
// (TransferTensor), and the plan the planner makes of them (TransferPlan: per tensor its
// pieces, messages and moves), with its options and limits. The planner is plan.h; the
// helpers of the planner (pieces.h, grid.h, split.h, collective_plan.h), the schedule, the
// program and the verbs include these types alone. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_TYPES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_TYPES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/sharding/region_copy.h"

namespace sdrt::internal {

// The most dims a resharded tensor may have: the strided copy's (as a sharded index's).
inline constexpr int kMaxTransferDims = kMaxCopyDims;
// The most ShardedTensor boxes one layout may list.
inline constexpr int64_t kMaxTransferBoxes = int64_t{1} << 20;
// The most indices a _StridedShard layout may list: its owned sets are index lists
// (sharding.h), one per rank, so the split dim's size times the mesh's rank count is
// bounded (2^28: a 152,064-row vocabulary over 1,024 ranks fits).
inline constexpr int64_t kMaxStridedIndices = int64_t{1} << 28;
// The destination rank of a collective message (every rank receives it).
inline constexpr int64_t kEveryRank = -1;

// How a tensor's bytes travel: point to point, or by one collective of every rank.
enum class Collective : uint8_t { kNone, kBroadcast, kAllGather };

// One ShardedTensor shard: the box [offsets, offsets + sizes) on global rank `rank`.
// Sizes may be 0 (an empty box; its offsets may then exceed the dim, as
// ChunkShardingSpec makes them).
struct TransferBox {
  IntVector offsets;
  IntVector sizes;
  int64_t rank = 0;
};

// Where a tensor lives on one side: a DTensor layout (mesh over global ranks +
// placements: Shard, Replicate, _StridedShard) when `mesh` is set, else ShardedTensor
// boxes. A rank's locals of one tensor are numbered 0, 1, ... : always one (index 0) for a
// mesh rank, one per box of that rank in box order for boxes.
struct TransferLayout {
  std::shared_ptr<const DeviceMesh> mesh;
  std::vector<Placement> placements;
  std::vector<TransferBox> boxes;
};

struct TransferTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;  // global; empty for a 0-dim tensor
  TransferLayout source;
  TransferLayout destination;
  // Destination elements no source piece holds are left alone (the caller zeroes them: a
  // gathered ShardedTensor whose boxes leave holes) instead of being an error.
  bool allow_uncovered = false;
  // The destination's dtype when it is not `dtype` (the source's): a cast, both dtypes of
  // CastKind kFloat (tensor/dtype.h), converted as PyTorch's `Tensor.to()` does. The wire
  // carries the narrower of the two: the side of the wider one converts (PlanTransfer).
  // Not with a Partial source.
  std::optional<DType> destination_dtype = std::nullopt;
};

// One piece of a layout: local `local` of global rank `rank`, owning `runs` (per global
// dim; global and local indices, region_copy.h) and holding `local_shape` elements.
struct TransferPiece {
  int64_t rank = 0;
  int local = 0;
  IntVector local_shape;
  ShardRuns runs;
  int64_t contribution = 0;  // the Partial contribution it holds; 0 without Partial
  // A destination piece off coordinate 0 of a Partial mesh dim: it takes nothing, and the
  // caller fills its local with the reduction's identity.
  bool identity = false;
};

// A side of a layout as the planner reads it: per piece (mesh rank order, or box order)
// what TransferPiece holds but its local shape and runs, which are its box's, kept once per
// box (`boxes`: the ranks of a mesh that agree on its sharded dims share one). A world's
// side has a piece per rank and far fewer boxes: the planner covers each box once (grid.h,
// SideCells), and makes whole pieces (Piece) only for the plans that keep them.
struct OutlinePiece {
  int64_t rank = 0;
  int64_t contribution = 0;
  int local = 0;
  int box = 0;  // into SideOutline::boxes
  bool identity = false;
};
struct OutlineBox {
  IntVector local_shape;
  ShardRuns runs;
};
struct SideOutline {
  // Shared by the sides of one mesh and placement kinds (their shapes differ in the runs).
  std::shared_ptr<const std::vector<OutlinePiece>> shared_pieces;
  std::vector<OutlineBox> boxes;
  // The boxes own disjoint elements (a mesh side) and no box has two pieces that take
  // something on one node (TransferPlanOptions::node_of_rank): no two pieces of one node
  // need one element, so there is nothing for a node to share (no fan-out).
  bool replicas_apart = false;

  const std::vector<OutlinePiece>& pieces() const { return *shared_pieces; }
  size_t size() const { return shared_pieces->size(); }
  const OutlinePiece& operator[](size_t p) const { return (*shared_pieces)[p]; }
  const ShardRuns& runs(size_t p) const {
    return boxes[static_cast<size_t>((*this)[p].box)].runs;
  }
  // Piece p whole.
  TransferPiece Piece(size_t p) const {
    const OutlinePiece& o = (*this)[p];
    const OutlineBox& box = boxes[static_cast<size_t>(o.box)];
    return {o.rank, o.local, box.local_shape, box.runs, o.contribution, o.identity};
  }
};

// One box moved: global indices [begin[d], end[d]) on every dim d (one element for a
// 0-dim tensor, with begin and end empty), taken from source piece `source` and put into
// destination piece `destination` (indices into TransferLayoutPlan's pieces). The local
// coordinates on either side are ClipRuns(piece.runs, begin, end).
struct TransferMove {
  int source = 0;
  int destination = 0;
  IntVector begin;
  IntVector end;
  int64_t bytes = 0;
  // A fan-out forward: `source` is a destination piece (the relay on the destination's
  // node), which holds the box once the direct moves are done.
  bool forward = false;
  // Filled by ScheduleTransfer (schedule.h) in the chunks it cuts, -1 elsewhere: the
  // box's first element in the source (destination) piece's local when that local is
  // row-major contiguous and the box is one dense range of it (ContiguousBoxOffset).
  int64_t source_offset = -1;
  int64_t destination_offset = -1;
};

// What moves of one tensor from one source rank to one destination rank (kEveryRank: to
// every rank, by the layout's collective; its moves' `destination` is then the piece of
// the lowest rank, every rank's piece being the whole tensor alike): its boxes, in
// the order they are packed (each box row-major over its global indices, the boxes back to
// back, every box a whole number of bytes), `bytes` in all. Contribution 0 is copied into
// the destination; a message of a later contribution is reduced into it, so it must be
// unpacked after every contribution-0 message of its tensor to that rank (for avg: after
// every earlier contribution's, the last one divides; the plan's order).
struct TransferMessage {
  int64_t source_rank = 0;
  int64_t destination_rank = 0;
  int64_t contribution = 0;
  // Inline for one move (most messages of a large world carry one box: no allocation).
  absl::InlinedVector<TransferMove, 1> moves;
  int64_t bytes = 0;
  // Fan-out forwards (every move forward): packed from the relay's destination locals,
  // sent after every direct message of the plan has arrived.
  bool forward = false;
};

// Byte counts of a plan. Wire bytes travel between different ranks; self bytes are
// copies on one rank. Always every rank's, also in a plan of one rank.
struct TransferPlanStats {
  int64_t wire_bytes = 0;
  int64_t self_bytes = 0;
  // The least any plan must move: over destination pieces, the bytes the piece needs
  // (times the contributions of a Partial source) minus those a source piece on its own
  // rank already holds.
  int64_t optimum_bytes = 0;
  int64_t max_sent_bytes = 0;      // wire bytes sent by the busiest rank
  int64_t max_received_bytes = 0;  // wire bytes received by the busiest rank
  int64_t messages = 0;            // messages between different ranks
  int64_t self_messages = 0;
  // Bytes between ranks of different nodes (TransferPlanOptions::node_of_rank; with fan-out
  // each cell enters a node once); 0 without node_of_rank.
  int64_t internode_bytes = 0;
  // Of those, the most one node sends and the most one node receives (point-to-point
  // layouts; a layout moved by a collective adds to neither).
  int64_t max_node_sent_bytes = 0;
  int64_t max_node_received_bytes = 0;
};

// The pieces of one side of a layout, read as a const std::vector<TransferPiece>: shared by
// the layouts of one plan whose side is alike (an engine's mesh under every tensor of one
// shape), since a world's side has a piece per rank.
class PieceList {
 public:
  PieceList() = default;
  PieceList(std::vector<TransferPiece> pieces)  // NOLINT: a list is its pieces
      : pieces_(std::make_shared<const std::vector<TransferPiece>>(std::move(pieces))) {}
  explicit PieceList(std::shared_ptr<const std::vector<TransferPiece>> pieces)
      : pieces_(std::move(pieces)) {}

  const std::vector<TransferPiece>& get() const { return pieces_ ? *pieces_ : Empty(); }
  operator const std::vector<TransferPiece>&() const { return get(); }  // NOLINT
  const TransferPiece& operator[](size_t i) const { return get()[i]; }
  size_t size() const { return get().size(); }
  bool empty() const { return get().empty(); }
  std::vector<TransferPiece>::const_iterator begin() const { return get().begin(); }
  std::vector<TransferPiece>::const_iterator end() const { return get().end(); }

 private:
  static const std::vector<TransferPiece>& Empty() {
    static const std::vector<TransferPiece> empty;
    return empty;
  }

  std::shared_ptr<const std::vector<TransferPiece>> pieces_;
};

// What every tensor of one (dtype, global shape, source layout, destination layout) has
// alike: planned once per plan, shared by those tensors.
struct TransferLayoutPlan {
  // Mesh rank order, or box order; in a plan of one rank (TransferPlanOptions::rank) of a
  // point-to-point layout, only the pieces that rank uses: its own and those its messages'
  // moves name, in that order.
  PieceList source;
  PieceList destination;                // likewise
  int64_t contributions = 1;            // Partial contributions of the source (1: none)
  ReduceOp reduce_op = ReduceOp::kSum;  // how they combine, when contributions > 1
  // By (contribution, source rank, destination rank): every rank's messages, or those the
  // plan's rank sends or receives (TransferPlanOptions::rank).
  std::vector<TransferMessage> messages;
  // Of one such tensor, every rank's messages counted (max_sent/max_received unset), and
  // the wire bytes each rank sends and receives: (rank, bytes), by rank.
  TransferPlanStats stats;
  std::vector<std::pair<int64_t, int64_t>> sent;
  std::vector<std::pair<int64_t, int64_t>> received;
  // With node ids, the inter-node bytes each node sends and receives: (node, bytes), by node.
  std::vector<std::pair<int64_t, int64_t>> node_sent;
  std::vector<std::pair<int64_t, int64_t>> node_received;
  // kNone: `messages` are point to point. Else every message goes to kEveryRank by this
  // collective, kBroadcast from `root`.
  Collective collective = Collective::kNone;
  int64_t root = -1;
};

// The dtypes of a cast's locals (TransferTensor::destination_dtype).
struct TransferCast {
  DType source = DType::kFloat32;
  DType destination = DType::kFloat32;
};

struct TransferTensorPlan {
  std::string name;
  DType dtype = DType::kFloat32;  // in the buckets and on the wire: every byte count's
  IntVector shape;
  std::shared_ptr<const TransferLayoutPlan> layout;  // never null in a plan
  std::optional<TransferCast> cast = std::nullopt;  // unset: both sides' locals are of `dtype`

  DType source_dtype() const { return cast ? cast->source : dtype; }
  DType destination_dtype() const { return cast ? cast->destination : dtype; }

  const std::vector<TransferPiece>& source() const { return layout->source; }
  const std::vector<TransferPiece>& destination() const { return layout->destination; }
  int64_t contributions() const { return layout->contributions; }
  ReduceOp reduce_op() const { return layout->reduce_op; }
  const std::vector<TransferMessage>& messages() const { return layout->messages; }
};

// A plan: a value, kept and executed as often as the layouts stay the same.
struct TransferPlan {
  std::vector<TransferTensorPlan> tensors;  // in descriptor order
  int64_t rank = -1;                       // whose messages it keeps; -1: every rank's
  int64_t world_size = 0;                  // TransferPlanOptions::world_size
  TransferPlanStats stats;
};

struct TransferPlanOptions {
  // Keep only the messages this global rank sends or receives (what its executor needs)
  // and the pieces it uses; -1: every rank's (the one-process simulator). The stats count
  // every rank either way.
  int64_t rank = -1;
  // The node of each global rank (ranks past its end: a node of their own). When given,
  // a cell that several destination pieces of one node need and no rank of that node
  // holds enters the node once: one of those pieces (the relay, rotating by cell) takes
  // it from the holders, the others get it from the relay in forward messages after the
  // direct ones. Not for Partial sources (their contributions go straight to each piece).
  std::vector<int64_t> node_of_rank;
  // The number of ranks of the communicator the plan runs on (0: unknown), and the
  // collectives a layout may be moved by when every one of those ranks needs the whole
  // tensor (see "Collectives" above; none by default).
  int64_t world_size = 0;
  bool broadcast = false;
  bool all_gather = false;
  // The most cells of the common refinement one tensor may have, counting a cell once per
  // source piece and once per destination piece that covers it, plus the grid itself.
  int64_t max_cells = int64_t{1} << 22;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_TYPES_H_
