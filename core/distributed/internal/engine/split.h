// The two steps of reshard planning (plan.h) that act on boxes: sharing a cell
// that several source pieces hold among them, and merging adjacent moves. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Bytes of the box [begin, end) of `dtype` (InvalidArgument when not whole).
absl::StatusOr<int64_t> BoxBytes(DType dtype, IntSpan begin, IntSpan end);

// A slab of a cell and its bytes.
struct HolderSlab {
  IntVector begin;
  IntVector end;
  int64_t bytes = 0;
};

// A move as the planner's walk makes it: a TransferMove whose box, `begin` and `end` (the
// tensor's ndim indices each), is read from the walk's cells and slabs, which stay put until
// the move is counted (LayoutMessages::Count makes the moves a plan keeps whole).
struct PlannedMove {
  int source = 0;
  int destination = 0;
  const int64_t* begin = nullptr;
  const int64_t* end = nullptr;
  int64_t bytes = 0;
  bool forward = false;
};

// The slabs SplitAmongHolders cut a cell into, asked for `count` of them (0: none cut
// yet; min(count, length) made, or one when a sub-byte dtype cannot be cut): the planner
// keeps them per cell of a box, for the pieces of that box after the first.
struct HolderSlabs {
  int64_t count = 0;
  std::vector<HolderSlab> slabs;
};

// Appends to `moves` the moves that bring the cell [begin, end) of a tensor of `shape` to
// destination piece `destination` from the source pieces `held` (indices into `sources`,
// none on the destination's rank, at least one), where `replicas` destination pieces (the
// piece's box's) need the same cell. One holder sends the whole cell. Several (k) holders:
// the cell is cut into min(m, length) slabs, m = k / gcd(k, replicas) (so the replicas'
// slabs together are a multiple of the holders: the whole cell when the replicas are a
// multiple of k, one slab per holder when they share no factor), along its longest dim
// (the first longest; for a sub-byte dtype the longest dim whose slabs begin and end on
// whole bytes, else not cut), slab sizes differing by at most one index; the slabs, largest
// first, go to the holders in increasing order of what their ranks have sent so far (ties:
// holder order), so the replicas take the holders in turn. `slabs` keeps the cut: made
// again when it was cut into another number of slabs. `sent` (wire bytes per source rank so
// far, indexed by rank; every holder's rank below its size) is updated.
absl::Status SplitAmongHolders(DType dtype, IntSpan shape, const SideOutline& sources,
                               absl::Span<const int> held, int destination, int64_t replicas,
                               IntSpan begin, IntSpan end, HolderSlabs& slabs,
                               std::vector<int64_t>& sent, std::vector<PlannedMove>& moves);

// With fan-out, the pieces of each node that need each cell: for the CSR lists of the
// destination pieces covering each cell (needs[needs_first[c] .. needs_first[c + 1]), in
// piece order), the entries of each cell regrouped by node (piece order within a node),
// and for each entry i of `needs` the group of its node: members[first[i] .. first[i] +
// count[i]) are the destination pieces of its node that need its cell, in piece order;
// shared[c] is 1 when some node has more than one piece that needs cell c (else no group
// of c has more than one member, which the planner checks first, per cell).
struct NodeGroups {
  std::vector<int> members;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<uint8_t> shared;
};
NodeGroups GroupByNode(const std::vector<int64_t>& needs_first, const std::vector<int>& needs,
                       const SideOutline& destinations,
                       const std::function<int64_t(int64_t)>& node_of);

// The boxes FanOutCell's moves read, kept by the caller until they are counted (and
// reused for the next cell).
struct FanOutScratch {
  std::vector<HolderSlab> taken;   // the slabs the piece takes from the holders
  std::vector<HolderSlab> blocks;  // the blocks it takes from relays
  std::vector<int> relays;         // of the blocks
  HolderSlabs whole;               // the cell's slabs, when the piece takes it whole
};

// Appends the moves that bring cell `cell` [begin, end) to destination piece `destination`
// when no holder is on its node and `group` (the destination pieces of its node that need
// the cell, in piece order, `destination` among them; at least two) share it. When `cut`,
// the cell is cut into min(max(holders, group size), length) slabs as SplitAmongHolders
// cuts, the slabs in consecutive blocks, one per member (the block of slab i: i x members /
// slabs), block j relayed by member (j + cell) % members; else the whole cell is one block,
// relayed by member cell % members (the planner cuts cells when its tensor has fewer cells
// than the group has members, so that a tensor of one cell, a replicated norm, is shared,
// and a tensor of many is shared by its cells without multiplying its moves). The relay of
// a block takes its slabs from the holders that have sent least (as SplitAmongHolders; so
// does a piece on the relay's rank that is not the relay, since a copy on one rank is not
// wire bytes); every other member takes the block in a forward move from its relay. So
// each slab enters the node once, and the node's ranks share the bytes from outside and
// the forwarding alike. The moves read their boxes from the cell's [begin, end) and from
// `scratch`.
absl::Status FanOutCell(DType dtype, IntSpan shape, const SideOutline& sources,
                        const SideOutline& destinations, absl::Span<const int> held,
                        absl::Span<const int> group, int destination, int64_t cell, bool cut,
                        IntSpan begin, IntSpan end, FanOutScratch& scratch,
                        std::vector<int64_t>& sent, std::vector<PlannedMove>& moves);

// Merges moves with the same (forward, source, destination) that are adjacent along one dim and
// equal on every other, dim by dim from the last to the first. Bytes add up. The order of
// `moves` afterwards is unspecified.
void MergeMoves(std::vector<TransferMove>& moves);

// MergeMoves of moves that all have one (forward, source, destination) (at least one).
void MergeAdjacentBoxes(std::vector<TransferMove>& moves);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_
