// The two steps of reshard planning (plan.h) that act on boxes: sharing a cell
// that several source pieces hold among them, and merging adjacent moves. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Bytes of the box [begin, end) of `dtype` (InvalidArgument when not whole).
absl::StatusOr<int64_t> BoxBytes(DType dtype, IntSpan begin, IntSpan end);

// Appends to `moves` the moves that bring the cell [begin, end) of a tensor of `shape` to
// destination piece `destination` from the source pieces `held` (indices into `sources`,
// none on the destination's rank, at least one). One holder sends the whole cell. Several
// holders: the cell is cut into min(holders, length) slabs along its longest dim (the
// first longest; for a sub-byte dtype the longest dim whose slabs begin and end on whole
// bytes, else not cut), slab sizes differing by at most one index, and the slabs, largest
// first, go to the holders in increasing order of what their ranks have sent so far (ties:
// holder order). `sent` (wire bytes per source rank) is updated.
absl::Status SplitAmongHolders(DType dtype, IntSpan shape,
                               const std::vector<TransferPiece>& sources,
                               absl::Span<const int> held, int destination, IntSpan begin,
                               IntSpan end, std::map<int64_t, int64_t>& sent,
                               std::vector<TransferMove>& moves);

// With fan-out, each cell's relay on each node, chosen once per cell: for the CSR lists of
// the destination pieces covering each cell (needs[needs_first[c] .. needs_first[c + 1]),
// in piece order), relay[i] is the piece that takes cell c from the holders for needs[i]:
// the (c % k)-th, in piece order, of the k pieces of needs[i]'s node that need the cell.
std::vector<int> RelaysByNode(const std::vector<int64_t>& needs_first,
                              const std::vector<int>& needs,
                              const std::vector<TransferPiece>& destinations,
                              const std::function<int64_t(int64_t)>& node_of);

// Merges moves with the same (forward, source, destination) that are adjacent along one dim and
// equal on every other, dim by dim from the last to the first. Bytes add up. The order of
// `moves` afterwards is unspecified.
void MergeMoves(std::vector<TransferMove>& moves);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SPLIT_H_
