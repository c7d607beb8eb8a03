// The common refinement of a transfer's layouts (plan.h, "Method"): per dim the sorted cut
// points of every piece's runs, the cells they make, and which pieces cover each cell. Used
// by the point-to-point planner (plan.cc) and the collective one (collective_plan.cc). Not
// public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/tensor/shape.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

// InvalidArgument "reshard of tensor '<name>' (<dtype> <shape>): <what>".
absl::Status TransferInvalid(const TransferTensor& tensor, absl::string_view what);

// total += add, or InvalidArgument naming the tensor when that overflows.
absl::Status TransferAdd(int64_t& total, int64_t add, const TransferTensor& tensor);

// Per dim, the sorted distinct cut points of [0, shape) and of every run of the pieces of
// `a` and `b` (identity pieces left out: they take nothing); interval i of dim d is
// [cuts[d][i], cuts[d][i + 1]). Cells are numbered row-major over the intervals.
struct Grid {
  std::vector<std::vector<int64_t>> cuts;
  IntVector counts;  // intervals per dim
};

// Per dim, the interval indices a piece covers (its runs map to ranges of intervals).
using Cover = std::vector<std::vector<int64_t>>;

Grid MakeGrid(IntSpan shape, const std::vector<TransferPiece>& a,
              const std::vector<TransferPiece>& b);

// The piece's cover and its cell count, or -1 when the count exceeds `limit`.
int64_t CoverOf(const Grid& grid, const TransferPiece& piece, int64_t limit, Cover& cover);

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

// Which pieces cover each cell, CSR: pieces list[first[i] .. first[i + 1]) cover cell i,
// in piece order (identity pieces cover none). False when that takes more cells than
// `budget` (which counts them down).
bool CoverCells(const Grid& grid, int64_t cells, const std::vector<TransferPiece>& pieces,
                int64_t& budget, std::vector<int64_t>& first, std::vector<int>& list);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_GRID_H_
