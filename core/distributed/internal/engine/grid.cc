#include "sdrt/core/distributed/internal/engine/grid.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::Status TransferInvalid(const TransferTensor& tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("reshard of tensor '", tensor.name, "' (",
                                                 DTypeName(tensor.dtype), " ",
                                                 ShapeToString(tensor.shape), "): ", what));
}

absl::Status TransferAdd(int64_t& total, int64_t add, const TransferTensor& tensor) {
  if (__builtin_add_overflow(total, add, &total)) return TransferInvalid(tensor, "byte counts overflow");
  return absl::OkStatus();
}

Grid MakeGrid(IntSpan shape, const std::vector<TransferPiece>& a,
              const std::vector<TransferPiece>& b) {
  Grid grid;
  grid.cuts.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t>& cuts = grid.cuts[d];
    cuts = {0, shape[d]};
    for (const std::vector<TransferPiece>* side : {&a, &b}) {
      for (const TransferPiece& piece : *side) {
        if (piece.identity) continue;  // takes nothing
        for (const IndexRun& r : piece.runs[d]) {
          cuts.push_back(r.global);
          cuts.push_back(r.global + r.length);
        }
      }
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    grid.counts.push_back(static_cast<int64_t>(cuts.size()) - 1);
  }
  return grid;
}

int64_t CoverOf(const Grid& grid, const TransferPiece& piece, int64_t limit, Cover& cover) {
  cover.resize(grid.cuts.size());  // keeping the lists' storage
  for (std::vector<int64_t>& cells_of_dim : cover) cells_of_dim.clear();
  int64_t cells = 1;
  for (size_t d = 0; d < grid.cuts.size(); ++d) {
    const std::vector<int64_t>& cuts = grid.cuts[d];
    for (const IndexRun& r : piece.runs[d]) {
      const auto lo = std::lower_bound(cuts.begin(), cuts.end(), r.global) - cuts.begin();
      const auto hi =
          std::lower_bound(cuts.begin(), cuts.end(), r.global + r.length) - cuts.begin();
      for (int64_t i = lo; i < hi; ++i) cover[d].push_back(i);
    }
    if (__builtin_mul_overflow(cells, static_cast<int64_t>(cover[d].size()), &cells) ||
        cells > limit) {
      return -1;
    }
  }
  return cells;
}

bool CoverCells(const Grid& grid, int64_t cells, const std::vector<TransferPiece>& pieces,
                int64_t& budget, std::vector<int64_t>& first, std::vector<int>& list) {
  // Two passes over the pieces' covers (counts, then the lists), each cover made again in
  // one buffer rather than kept per piece.
  Cover cover;
  first.assign(static_cast<size_t>(cells) + 1, 0);
  for (const TransferPiece& piece : pieces) {
    if (piece.identity) continue;  // takes nothing
    const int64_t n = CoverOf(grid, piece, budget, cover);
    if (n < 0) return false;
    budget -= n;
    ForEachCell(grid, cover, [&](int64_t cell, IntSpan) {
      ++first[cell + 1];
      return absl::OkStatus();
    }).IgnoreError();
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  list.resize(static_cast<size_t>(first.back()));
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  for (size_t s = 0; s < pieces.size(); ++s) {
    if (pieces[s].identity) continue;
    CoverOf(grid, pieces[s], std::numeric_limits<int64_t>::max(), cover);  // fit above
    ForEachCell(grid, cover, [&](int64_t cell, IntSpan) {
      list[fill[cell]++] = static_cast<int>(s);
      return absl::OkStatus();
    }).IgnoreError();
  }
  return true;
}

}  // namespace sdrt::internal
