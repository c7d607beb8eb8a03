#include "sdrt/core/distributed/internal/reshard_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_pieces.h"
#include "sdrt/core/distributed/internal/reshard_split.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const ReshardTensor& tensor, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("reshard of tensor '", tensor.name, "' (",
                                                 DTypeName(tensor.dtype), " ",
                                                 ShapeToString(tensor.shape), "): ", what));
}

// The common refinement: per dim, the sorted distinct cut points; interval i of dim d is
// [cuts[d][i], cuts[d][i + 1]). Cells are numbered row-major over the intervals.
struct Grid {
  std::vector<std::vector<int64_t>> cuts;
  IntVector counts;  // intervals per dim
};

// Per dim, the interval indices a piece covers (its runs map to ranges of intervals).
using Cover = std::vector<std::vector<int64_t>>;

Grid MakeGrid(IntSpan shape, const std::vector<ReshardPiece>& a,
              const std::vector<ReshardPiece>& b) {
  Grid grid;
  grid.cuts.resize(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    std::vector<int64_t>& cuts = grid.cuts[d];
    cuts = {0, shape[d]};
    for (const std::vector<ReshardPiece>* side : {&a, &b}) {
      for (const ReshardPiece& piece : *side) {
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

// The piece's cover and its cell count, or -1 when the count exceeds `limit`.
int64_t CoverOf(const Grid& grid, const ReshardPiece& piece, int64_t limit, Cover& cover) {
  cover.assign(grid.cuts.size(), {});
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

absl::Status CheckedAdd(int64_t& total, int64_t add, const ReshardTensor& tensor) {
  if (__builtin_add_overflow(total, add, &total)) return Invalid(tensor, "byte counts overflow");
  return absl::OkStatus();
}

// Plans one tensor: its moves (merged) and its optimum bytes. `sent` is the wire bytes
// each source rank sends so far (all tensors), for balancing replicated cells.
absl::Status PlanTensor(const ReshardTensor& tensor, const ReshardTensorPlan& tp,
                        const ReshardPlanOptions& options, std::map<int64_t, int64_t>& sent,
                        std::vector<ReshardMove>& moves, int64_t& optimum) {
  const Grid grid = MakeGrid(tp.shape, tp.source, tp.destination);
  int64_t budget = options.max_cells;
  for (int64_t c : grid.counts) {
    if (c == 0) return absl::OkStatus();  // no elements
  }
  auto too_many = [&] {
    return Invalid(tensor, absl::StrCat("the common refinement has more than ", options.max_cells,
                                        " cells (ReshardPlanOptions::max_cells)"));
  };
  int64_t cells = 1;
  for (int64_t c : grid.counts) {
    if (c > budget / cells) return too_many();
    cells *= c;
  }
  budget -= cells;
  // Holders of each cell, CSR: the source pieces covering cell i are
  // holders[first[i] .. first[i + 1]), in piece order.
  std::vector<Cover> source_cover(tp.source.size());
  std::vector<int64_t> first(static_cast<size_t>(cells) + 1, 0);
  for (size_t s = 0; s < tp.source.size(); ++s) {
    const int64_t n = CoverOf(grid, tp.source[s], budget, source_cover[s]);
    if (n < 0) return too_many();
    budget -= n;
    SDRT_RETURN_IF_ERROR(ForEachCell(grid, source_cover[s], [&](int64_t cell, IntSpan) {
      ++first[cell + 1];
      return absl::OkStatus();
    }));
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<int> holders(static_cast<size_t>(first.back()));
  {
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (size_t s = 0; s < tp.source.size(); ++s) {
      SDRT_RETURN_IF_ERROR(ForEachCell(grid, source_cover[s], [&](int64_t cell, IntSpan) {
        holders[fill[cell]++] = static_cast<int>(s);
        return absl::OkStatus();
      }));
    }
  }
  Cover cover;
  std::vector<int> group;
  for (size_t p = 0; p < tp.destination.size(); ++p) {
    const ReshardPiece& dst = tp.destination[p];
    const int64_t n = CoverOf(grid, dst, budget, cover);
    if (n < 0) return too_many();
    budget -= n;
    IntVector begin(tp.shape.size()), end(tp.shape.size());
    SDRT_RETURN_IF_ERROR(ForEachCell(grid, cover, [&](int64_t cell, IntSpan index) {
      for (size_t d = 0; d < index.size(); ++d) {
        begin[d] = grid.cuts[d][index[d]];
        end[d] = grid.cuts[d][index[d] + 1];
      }
      const absl::Span<const int> held(holders.data() + first[cell],
                                       static_cast<size_t>(first[cell + 1] - first[cell]));
      if (held.empty()) {
        return Invalid(tensor,
                       absl::StrCat("destination rank ", dst.rank, " needs [", ShapeToString(begin),
                                    ", ", ShapeToString(end), ") that no source rank holds"));
      }
      const absl::StatusOr<int64_t> box_bytes = BoxBytes(tensor.dtype, begin, end);
      if (!box_bytes.ok()) return Invalid(tensor, box_bytes.status().message());
      const int64_t bytes = *box_bytes;
      // The holders by contribution (stable: piece order within one).
      group.assign(held.begin(), held.end());
      if (tp.contributions > 1) {
        std::stable_sort(group.begin(), group.end(), [&](int a, int b) {
          return tp.source[a].contribution < tp.source[b].contribution;
        });
      }
      size_t at = 0;
      for (int64_t c = 0; c < tp.contributions; ++c) {
        const size_t from = at;
        while (at < group.size() && tp.source[group[at]].contribution == c) ++at;
        if (at == from) {
          return Invalid(
              tensor, absl::StrCat("destination rank ", dst.rank, " needs [", ShapeToString(begin),
                                   ", ", ShapeToString(end), ") of Partial contribution ", c,
                                   " that no source rank holds"));
        }
        SDRT_RETURN_IF_ERROR(CheckedAdd(optimum, bytes, tensor));
        const absl::Span<const int> holders_c(group.data() + from, at - from);
        const auto self = std::find_if(holders_c.begin(), holders_c.end(),
                                       [&](int h) { return tp.source[h].rank == dst.rank; });
        if (self != holders_c.end()) {
          moves.push_back({*self, static_cast<int>(p), begin, end, bytes});
          optimum -= bytes;
          continue;
        }
        const absl::Status split = SplitAmongHolders(tensor.dtype, tp.shape, tp.source, holders_c,
                                                     static_cast<int>(p), begin, end, sent, moves);
        if (!split.ok()) return Invalid(tensor, split.message());
      }
      return absl::OkStatus();
    }));
  }
  MergeMoves(moves);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReshardPlan> PlanReshard(const std::vector<ReshardTensor>& tensors,
                                        const ReshardPlanOptions& options) {
  ReshardPlan plan;
  ReshardStats& stats = plan.stats;
  std::map<int64_t, int64_t> sent, received;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const ReshardTensor& tensor = tensors[t];
    ReshardTensorPlan tp;
    SDRT_RETURN_IF_ERROR(LayoutPieces(tensor, tp));
    std::vector<ReshardMove> moves;
    int64_t optimum = 0;
    SDRT_RETURN_IF_ERROR(PlanTensor(tensor, tp, options, sent, moves, optimum));
    SDRT_RETURN_IF_ERROR(CheckedAdd(stats.optimum_bytes, optimum, tensor));
    // One message per (source rank, destination rank), contribution 0 first, its moves in
    // piece and box order.
    auto key = [&](const ReshardMove& m) {
      return std::make_tuple(tp.source[m.source].contribution, tp.source[m.source].rank,
                             tp.destination[m.destination].rank, m.source, m.destination,
                             std::cref(m.begin));
    };
    std::sort(moves.begin(), moves.end(),
              [&](const ReshardMove& a, const ReshardMove& b) { return key(a) < key(b); });
    for (ReshardMove& move : moves) {
      const int64_t from = tp.source[move.source].rank;
      const int64_t to = tp.destination[move.destination].rank;
      if (plan.messages.empty() || plan.messages.back().tensor != t ||
          plan.messages.back().source_rank != from || plan.messages.back().destination_rank != to) {
        plan.messages.push_back({t, from, to, tp.source[move.source].contribution, {}, 0});
        ++(from == to ? stats.self_messages : stats.messages);
      }
      ReshardMessage& message = plan.messages.back();
      SDRT_RETURN_IF_ERROR(CheckedAdd(message.bytes, move.bytes, tensor));
      if (from == to) {
        SDRT_RETURN_IF_ERROR(CheckedAdd(stats.self_bytes, move.bytes, tensor));
      } else {
        SDRT_RETURN_IF_ERROR(CheckedAdd(stats.wire_bytes, move.bytes, tensor));
        SDRT_RETURN_IF_ERROR(CheckedAdd(received[to], move.bytes, tensor));
      }
      message.moves.push_back(std::move(move));
    }
    plan.tensors.push_back(std::move(tp));
  }
  for (const auto& [rank, bytes] : sent) {
    stats.max_sent_bytes = std::max(stats.max_sent_bytes, bytes);
  }
  for (const auto& [rank, bytes] : received) {
    stats.max_received_bytes = std::max(stats.max_received_bytes, bytes);
  }
  return plan;
}

}  // namespace sdrt::internal
