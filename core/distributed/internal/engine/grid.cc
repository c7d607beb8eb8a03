#include "sdrt/core/distributed/internal/engine/grid.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::Status TransferInvalid(const TransferTensor& tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("reshard of tensor '", tensor.name, "' (",
                                                 DTypeName(tensor.dtype), " ",
                                                 ShapeToString(tensor.shape), "): ", what));
}

absl::Status TransferOverflow(const TransferTensor& tensor) {
  return TransferInvalid(tensor, "byte counts overflow");
}

Grid MakeGrid(IntSpan shape, const SideOutline& a, const SideOutline& b) {
  Grid grid;
  grid.cuts.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) grid.cuts[d] = {0, shape[d]};
  for (const SideOutline* side : {&a, &b}) {
    std::vector<bool> read(side->boxes.size());
    for (const OutlinePiece& piece : side->pieces()) {
      if (piece.identity) continue;                        // takes nothing
      if (read[static_cast<size_t>(piece.box)]) continue;  // its box's cuts are in
      read[static_cast<size_t>(piece.box)] = true;
      const ShardRuns& runs = side->boxes[static_cast<size_t>(piece.box)].runs;
      for (size_t d = 0; d < shape.size(); ++d) {
        for (const IndexRun& r : runs[d]) {
          grid.cuts[d].push_back(r.global);
          grid.cuts[d].push_back(r.global + r.length);
        }
      }
    }
  }
  for (std::vector<int64_t>& cuts : grid.cuts) {
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    grid.counts.push_back(static_cast<int64_t>(cuts.size()) - 1);
  }
  return grid;
}

int64_t CoverOf(const Grid& grid, const ShardRuns& runs, int64_t limit, Cover& cover) {
  cover.resize(grid.cuts.size());  // keeping the lists' storage
  for (std::vector<int64_t>& cells_of_dim : cover) cells_of_dim.clear();
  int64_t cells = 1;
  for (size_t d = 0; d < grid.cuts.size(); ++d) {
    const std::vector<int64_t>& cuts = grid.cuts[d];
    for (const IndexRun& r : runs[d]) {
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

SideCells::SideCells(const Grid& grid, const SideOutline& side)
    : grid_(grid), side_(side), slot_of_box_(side.boxes.size(), -1) {}

int SideCells::Of(size_t p, int64_t limit) {
  int& slot = slot_of_box_[static_cast<size_t>(side_[p].box)];
  if (slot >= 0) return peaks_[static_cast<size_t>(slot)] > limit ? -1 : slot;
  if (CoverOf(grid_, side_.runs(p), limit, cover_) < 0) return -1;
  int64_t product = 1, peak = 0;  // within `limit`: CoverOf checked every product
  for (const std::vector<int64_t>& c : cover_) {
    product *= static_cast<int64_t>(c.size());
    peak = std::max(peak, product);
  }
  const size_t from = cells_.size();
  ForEachCell(grid_, cover_, [&](int64_t cell, IntSpan) {
    cells_.push_back(cell);
    return absl::OkStatus();
  }).IgnoreError();
  slot = static_cast<int>(slots_.size());
  slots_.emplace_back(from, cells_.size());
  peaks_.push_back(peak);
  return slot;
}

std::vector<GridCell> GridCells(const Grid& grid, DType dtype, absl::Span<const int64_t> cells) {
  std::vector<GridCell> out(cells.size());
  const size_t ndim = grid.counts.size();
  for (size_t i = 0; i < cells.size(); ++i) {
    GridCell& c = out[i];
    c.cell = cells[i];
    c.begin.resize(ndim);
    c.end.resize(ndim);
    int64_t rest = cells[i];
    for (size_t d = ndim; d > 0; --d) {
      const int64_t interval = rest % grid.counts[d - 1];
      rest /= grid.counts[d - 1];
      c.begin[d - 1] = grid.cuts[d - 1][static_cast<size_t>(interval)];
      c.end[d - 1] = grid.cuts[d - 1][static_cast<size_t>(interval) + 1];
    }
    const absl::StatusOr<int64_t> bytes = BoxBytes(dtype, c.begin, c.end);
    c.bytes = bytes.ok() ? *bytes : -1;
  }
  return out;
}

std::vector<GridCell>* WalkCells::Of(size_t p, int64_t limit) {
  const int slot = side_.Of(p, limit);
  if (slot < 0) return nullptr;
  const auto s = static_cast<size_t>(slot);
  if (s < by_slot_.size() && !by_slot_[s].empty()) return &by_slot_[s];
  const absl::Span<const int64_t> cells = side_.Cells(slot);
  if (s == by_slot_.size()) {
    by_slot_.emplace_back();
    if (kept_ + static_cast<int64_t>(cells.size()) <= max_kept_) {
      kept_ += static_cast<int64_t>(cells.size());
      by_slot_.back() = GridCells(grid_, dtype_, cells);
      return &by_slot_.back();
    }
  }
  own_ = GridCells(grid_, dtype_, cells);
  return &own_;
}

bool CoverCells(const Grid& grid, int64_t cells, const SideOutline& pieces, int64_t& budget,
                std::vector<int64_t>& first, std::vector<int>& list) {
  // Two passes over the pieces' cells (counts, then the lists), each box's made once.
  SideCells side(grid, pieces);
  std::vector<int> slot(pieces.size(), -1);
  first.assign(static_cast<size_t>(cells) + 1, 0);
  for (size_t s = 0; s < pieces.size(); ++s) {
    if (pieces[s].identity) continue;  // takes nothing
    slot[s] = side.Of(s, budget);
    if (slot[s] < 0) return false;
    const absl::Span<const int64_t> covered = side.Cells(slot[s]);
    budget -= static_cast<int64_t>(covered.size());
    for (int64_t cell : covered) ++first[static_cast<size_t>(cell) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  list.resize(static_cast<size_t>(first.back()));
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  for (size_t s = 0; s < pieces.size(); ++s) {
    if (slot[s] < 0) continue;  // an identity piece
    for (int64_t cell : side.Cells(slot[s])) {
      list[static_cast<size_t>(fill[static_cast<size_t>(cell)]++)] = static_cast<int>(s);
    }
  }
  return true;
}

}  // namespace sdrt::internal
