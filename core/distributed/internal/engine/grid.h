// The common refinement of a transfer's layouts (plan.h, "Method"): per dim the sorted cut
// points of every piece's runs, the cells they make, and which pieces cover each cell. Used
// by the point-to-point planner (plan.cc) and the collective one (collective_plan.cc). Not
// public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/split.h"
#include "sdrt/tensor/shape.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

// InvalidArgument "reshard of tensor '<name>' (<dtype> <shape>): <what>".
absl::Status TransferInvalid(const TransferTensor& tensor, absl::string_view what);

// InvalidArgument "... byte counts overflow" naming the tensor.
absl::Status TransferOverflow(const TransferTensor& tensor);

// total += add, or TransferOverflow when that overflows (inline: a plan adds per move).
inline absl::Status TransferAdd(int64_t& total, int64_t add, const TransferTensor& tensor) {
  if (__builtin_add_overflow(total, add, &total)) return TransferOverflow(tensor);
  return absl::OkStatus();
}

// Per dim, the sorted distinct cut points of [0, shape) and of every run of the pieces of
// `a` and `b` (identity pieces left out: they take nothing; each box read once);
// interval i of dim d is [cuts[d][i], cuts[d][i + 1]). Cells are numbered row-major over
// the intervals.
struct Grid {
  std::vector<std::vector<int64_t>> cuts;
  IntVector counts;  // intervals per dim
};

// Per dim, the interval indices a piece covers (its runs map to ranges of intervals).
using Cover = std::vector<std::vector<int64_t>>;

Grid MakeGrid(IntSpan shape, const SideOutline& a, const SideOutline& b);

// The cover of a piece owning `runs` and its cell count, or -1 when the count exceeds
// `limit`.
int64_t CoverOf(const Grid& grid, const ShardRuns& runs, int64_t limit, Cover& cover);

// Calls fn(linear cell index, per-dim interval indices) for every cell of `cover`.
template <typename Fn>
absl::Status ForEachCell(const Grid& grid, const Cover& cover, Fn fn) {
  const size_t ndim = cover.size();
  for (const std::vector<int64_t>& c : cover) {
    if (c.empty()) return absl::OkStatus();
  }
  std::vector<size_t> pick(ndim, 0);
  IntVector index(ndim);
  while (true) {
    int64_t linear = 0;
    for (size_t d = 0; d < ndim; ++d) {
      index[d] = cover[d][pick[d]];
      linear = linear * grid.counts[d] + index[d];
    }
    SDRT_RETURN_IF_ERROR(fn(linear, index));
    size_t d = ndim;
    for (; d > 0; --d) {
      if (++pick[d - 1] < cover[d - 1].size()) break;
      pick[d - 1] = 0;
    }
    if (d == 0) return absl::OkStatus();
  }
}

// The cells each piece of one side covers (linear indices, in ForEachCell's order), made
// once per box (SideOutline). `grid` and `side` outlive it.
class SideCells {
 public:
  SideCells(const Grid& grid, const SideOutline& side);

  // The slot of piece p's cells (pieces of one box share one), or -1 when they are more
  // than `limit` (as CoverOf: when the product of the first d dims' cover sizes is, for any
  // d). Slots are numbered from 0 in the order first asked for.
  int Of(size_t p, int64_t limit);
  absl::Span<const int64_t> Cells(int slot) const {
    const auto [from, to] = slots_[static_cast<size_t>(slot)];
    return absl::MakeConstSpan(cells_).subspan(from, to - from);
  }

 private:
  const Grid& grid_;
  const SideOutline& side_;
  std::vector<int> slot_of_box_;  // -1 until made
  std::vector<std::pair<size_t, size_t>> slots_;  // [from, to) in cells_
  std::vector<int64_t> peaks_;  // per slot, the largest product of its first d cover sizes
  std::vector<int64_t> cells_;
  Cover cover_;
};

// One cell: its linear index, its box [begin, end) and its bytes of the tensor's dtype (-1
// when not whole bytes: BoxBytes, split.h, says why).
struct GridCell {
  int64_t cell = 0;
  IntVector begin;
  IntVector end;
  int64_t bytes = 0;
  HolderSlabs slabs;  // the cell's cut among its senders, kept for the box's next piece
};
std::vector<GridCell> GridCells(const Grid& grid, DType dtype, absl::Span<const int64_t> cells);

// The cells a planner's walk gives each piece of one side: per box, the GridCells made once
// and kept for the box's later pieces while the kept cells number at most `max_kept` in all
// (beyond, a piece's are made for it alone, so memory stays near a streamed walk's).
// `grid` and `side` outlive it.
class WalkCells {
 public:
  WalkCells(const Grid& grid, DType dtype, const SideOutline& side, int64_t max_kept)
      : grid_(grid), dtype_(dtype), side_(grid, side), max_kept_(max_kept) {}

  // Piece p's cells, or nullptr when they are more than `limit` (SideCells::Of). Valid
  // until the next call.
  std::vector<GridCell>* Of(size_t p, int64_t limit);

 private:
  const Grid& grid_;
  DType dtype_;
  SideCells side_;
  int64_t max_kept_;
  int64_t kept_ = 0;
  std::vector<std::vector<GridCell>> by_slot_;  // empty when not kept
  std::vector<GridCell> own_;                   // a piece's, when its box's are not kept
};

// Which pieces cover each cell, CSR: pieces list[first[i] .. first[i + 1]) cover cell i,
// in piece order (identity pieces cover none). False when that takes more cells than
// `budget` (which counts them down).
bool CoverCells(const Grid& grid, int64_t cells, const SideOutline& pieces, int64_t& budget,
                std::vector<int64_t>& first, std::vector<int>& list);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_
