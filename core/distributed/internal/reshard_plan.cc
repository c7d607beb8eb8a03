#include "sdrt/core/distributed/internal/reshard_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
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

// Which pieces cover each cell, CSR: pieces list[first[i] .. first[i + 1]) cover cell i,
// in piece order. False when that takes more cells than `budget` (which counts them down).
bool CoverCells(const Grid& grid, int64_t cells, const std::vector<ReshardPiece>& pieces,
                int64_t& budget, std::vector<int64_t>& first, std::vector<int>& list) {
  std::vector<Cover> covers(pieces.size());
  first.assign(static_cast<size_t>(cells) + 1, 0);
  for (size_t s = 0; s < pieces.size(); ++s) {
    const int64_t n = CoverOf(grid, pieces[s], budget, covers[s]);
    if (n < 0) return false;
    budget -= n;
    ForEachCell(grid, covers[s], [&](int64_t cell, IntSpan) {
      ++first[cell + 1];
      return absl::OkStatus();
    }).IgnoreError();
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  list.resize(static_cast<size_t>(first.back()));
  std::vector<int64_t> fill(first.begin(), first.end() - 1);
  for (size_t s = 0; s < pieces.size(); ++s) {
    ForEachCell(grid, covers[s], [&](int64_t cell, IntSpan) {
      list[fill[cell]++] = static_cast<int>(s);
      return absl::OkStatus();
    }).IgnoreError();
  }
  return true;
}

absl::Status CheckedAdd(int64_t& total, int64_t add, const ReshardTensor& tensor) {
  if (__builtin_add_overflow(total, add, &total)) return Invalid(tensor, "byte counts overflow");
  return absl::OkStatus();
}

// Plans one tensor: its moves (not merged yet) and its optimum bytes.
absl::Status PlanTensor(const ReshardTensor& tensor, const ReshardLayoutPlan& tp,
                        const ReshardPlanOptions& options, std::vector<ReshardMove>& moves,
                        int64_t& optimum) {
  const Grid grid = MakeGrid(tensor.shape, tp.source, tp.destination);
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
  std::vector<int64_t> first;
  std::vector<int> holders;
  if (!CoverCells(grid, cells, tp.source, budget, first, holders)) return too_many();
  // With fan-out, the destination pieces covering each cell likewise.
  const bool fan_out = !options.node_of_rank.empty() && tp.contributions == 1;
  std::vector<int64_t> needs_first;
  std::vector<int> needs;
  if (fan_out && !CoverCells(grid, cells, tp.destination, budget, needs_first, needs)) {
    return too_many();
  }
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(options.node_of_rank.size()) ? options.node_of_rank[rank]
                                                                    : -1 - rank;
  };
  Cover cover;
  std::vector<int> group, on_node;
  std::map<int64_t, int64_t> sent;  // wire bytes each source rank sends so far
  for (size_t p = 0; p < tp.destination.size(); ++p) {
    const ReshardPiece& dst = tp.destination[p];
    const int64_t n = CoverOf(grid, dst, budget, cover);
    if (n < 0) return too_many();
    budget -= n;
    IntVector begin(tensor.shape.size()), end(tensor.shape.size());
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
      // Fan-out: no holder on this piece's node, and other pieces on the node need the
      // cell too: one of them (the relay) takes it from the holders, the others from it.
      if (fan_out && std::none_of(held.begin(), held.end(), [&](int h) {
            return node_of(tp.source[h].rank) == node_of(dst.rank);
          })) {
        group.clear();
        for (int64_t i = needs_first[cell]; i < needs_first[cell + 1]; ++i) {
          if (node_of(tp.destination[needs[i]].rank) == node_of(dst.rank)) {
            group.push_back(needs[i]);
          }
        }
        const int relay = group[static_cast<size_t>(cell) % group.size()];
        // A second piece on the relay's rank takes the cell from the holders, as without
        // nodes: a copy on one rank would not be the wire bytes the optimum counts.
        if (relay != static_cast<int>(p) && tp.destination[relay].rank != dst.rank) {
          SDRT_RETURN_IF_ERROR(CheckedAdd(optimum, bytes, tensor));
          moves.push_back({relay, static_cast<int>(p), begin, end, bytes, /*forward=*/true});
          return absl::OkStatus();
        }
      }
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
        // With nodes, holders on the piece's node send when there are any.
        absl::Span<const int> senders = holders_c;
        if (fan_out) {
          on_node.clear();
          for (int h : holders_c) {
            if (node_of(tp.source[h].rank) == node_of(dst.rank)) on_node.push_back(h);
          }
          if (!on_node.empty()) senders = on_node;
        }
        const absl::Status split = SplitAmongHolders(tensor.dtype, tensor.shape, tp.source, senders,
                                                     static_cast<int>(p), begin, end, sent, moves);
        if (!split.ok()) return Invalid(tensor, split.message());
      }
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// Plans the layout of `tensor`: its pieces, its messages (those of `rank` only, unless
// -1) and the stats of one such tensor.
absl::StatusOr<std::shared_ptr<const ReshardLayoutPlan>> PlanLayout(
    const ReshardTensor& tensor, const ReshardPlanOptions& options) {
  auto layout = std::make_shared<ReshardLayoutPlan>();
  ReshardLayoutPlan& tp = *layout;
  SDRT_RETURN_IF_ERROR(LayoutPieces(tensor, tp));
  std::vector<ReshardMove> moves;
  ReshardStats& stats = tp.stats;
  SDRT_RETURN_IF_ERROR(PlanTensor(tensor, tp, options, moves, stats.optimum_bytes));
  // The stats count every move (merging changes neither the bytes nor the set of (source
  // rank, destination rank, contribution) that make the messages); only the moves kept
  // are merged and sorted.
  absl::flat_hash_map<int64_t, int64_t> sent, received;
  std::vector<ReshardMove> kept;
  // A move's sending rank and contribution (a forward's: its relay's, 0).
  auto from_of = [&](const ReshardMove& m) {
    return m.forward ? tp.destination[m.source].rank : tp.source[m.source].rank;
  };
  auto contribution_of = [&](const ReshardMove& m) {
    return m.forward ? int64_t{0} : tp.source[m.source].contribution;
  };
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(options.node_of_rank.size()) ? options.node_of_rank[rank]
                                                                    : -1 - rank;
  };
  absl::flat_hash_set<std::tuple<bool, int64_t, int64_t, int64_t>> pairs;
  for (ReshardMove& move : moves) {
    const int64_t from = from_of(move);
    const int64_t to = tp.destination[move.destination].rank;
    if (pairs.insert({move.forward, from, to, contribution_of(move)}).second) {
      ++(from == to ? stats.self_messages : stats.messages);
    }
    if (!options.node_of_rank.empty() && node_of(from) != node_of(to)) {
      SDRT_RETURN_IF_ERROR(CheckedAdd(stats.internode_bytes, move.bytes, tensor));
    }
    if (from == to) {
      SDRT_RETURN_IF_ERROR(CheckedAdd(stats.self_bytes, move.bytes, tensor));
    } else {
      SDRT_RETURN_IF_ERROR(CheckedAdd(stats.wire_bytes, move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(CheckedAdd(sent[from], move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(CheckedAdd(received[to], move.bytes, tensor));
    }
    if (options.rank < 0 || from == options.rank || to == options.rank) {
      kept.push_back(std::move(move));
    }
  }
  MergeMoves(kept);
  // One message per (source rank, destination rank), forwards last, contribution 0 first,
  // its moves in piece and box order.
  auto key = [&](const ReshardMove& m) {
    return std::make_tuple(m.forward, contribution_of(m), from_of(m),
                           tp.destination[m.destination].rank, m.source, m.destination,
                           std::cref(m.begin));
  };
  std::sort(kept.begin(), kept.end(),
            [&](const ReshardMove& a, const ReshardMove& b) { return key(a) < key(b); });
  for (ReshardMove& move : kept) {
    const int64_t from = from_of(move);
    const int64_t to = tp.destination[move.destination].rank;
    const int64_t contribution = contribution_of(move);
    if (tp.messages.empty() || tp.messages.back().forward != move.forward ||
        tp.messages.back().source_rank != from || tp.messages.back().destination_rank != to ||
        tp.messages.back().contribution != contribution) {
      tp.messages.push_back({from, to, contribution, {}, 0, move.forward});
    }
    ReshardMessage& message = tp.messages.back();
    SDRT_RETURN_IF_ERROR(CheckedAdd(message.bytes, move.bytes, tensor));
    message.moves.push_back(std::move(move));
  }
  tp.sent.assign(sent.begin(), sent.end());
  tp.received.assign(received.begin(), received.end());
  std::sort(tp.sent.begin(), tp.sent.end());
  std::sort(tp.received.begin(), tp.received.end());
  return std::shared_ptr<const ReshardLayoutPlan>(std::move(layout));
}

// The bytes that decide a tensor's layout plan: dtype, shape and both layouts, a mesh by
// an id given to each distinct (shape, ranks).
class LayoutKeys {
 public:
  std::string Key(const ReshardTensor& tensor) {
    std::string key;
    PutU64(&key, static_cast<uint64_t>(tensor.dtype));
    PutU64(&key, tensor.shape.size());
    for (int64_t s : tensor.shape) PutU64(&key, static_cast<uint64_t>(s));
    for (const ReshardLayout* side : {&tensor.source, &tensor.destination}) {
      PutU64(&key, side->mesh == nullptr ? 0 : 1 + MeshId(*side->mesh));
      PutU64(&key, side->placements.size());
      for (const Placement& p : side->placements) {
        PutU64(&key, static_cast<uint64_t>(p.kind()));
        PutU64(&key, static_cast<uint64_t>(p.dim()));
        PutU64(&key, static_cast<uint64_t>(p.split_factor()));
        PutU64(&key, static_cast<uint64_t>(p.reduce_op()));
      }
      PutU64(&key, side->boxes.size());
      for (const ReshardBox& box : side->boxes) {
        PutU64(&key, static_cast<uint64_t>(box.rank));
        PutU64(&key, box.offsets.size());
        for (int64_t v : box.offsets) PutU64(&key, static_cast<uint64_t>(v));
        PutU64(&key, box.sizes.size());
        for (int64_t v : box.sizes) PutU64(&key, static_cast<uint64_t>(v));
      }
    }
    return key;
  }

 private:
  uint64_t MeshId(const DeviceMesh& mesh) {
    const auto known = by_address_.find(&mesh);
    if (known != by_address_.end()) return known->second;
    std::string content;
    PutU64(&content, mesh.shape().size());
    for (int64_t s : mesh.shape()) PutU64(&content, static_cast<uint64_t>(s));
    for (int64_t r : mesh.ranks()) PutU64(&content, static_cast<uint64_t>(r));
    const uint64_t id = by_content_.emplace(std::move(content), by_content_.size()).first->second;
    by_address_.emplace(&mesh, id);
    return id;
  }

  absl::flat_hash_map<const DeviceMesh*, uint64_t> by_address_;
  absl::flat_hash_map<std::string, uint64_t> by_content_;
};

// Adds `times` x `bytes` per rank into `total`.
absl::Status AddPerRank(const std::vector<std::pair<int64_t, int64_t>>& bytes, int64_t times,
                        absl::flat_hash_map<int64_t, int64_t>& total) {
  for (const auto& [rank, b] : bytes) {
    int64_t scaled = 0;
    if (__builtin_mul_overflow(b, times, &scaled) ||
        __builtin_add_overflow(total[rank], scaled, &total[rank])) {
      return absl::InvalidArgumentError("reshard: bytes moved by one rank overflow int64");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReshardPlan> PlanReshard(const std::vector<ReshardTensor>& tensors,
                                        const ReshardPlanOptions& options) {
  ReshardPlan plan;
  plan.rank = options.rank < 0 ? -1 : options.rank;
  ReshardStats& stats = plan.stats;
  LayoutKeys keys;
  // Each distinct layout once, with the number of tensors that share it.
  absl::flat_hash_map<std::string, std::pair<std::shared_ptr<const ReshardLayoutPlan>, int64_t>>
      layouts;
  plan.tensors.reserve(tensors.size());
  for (const ReshardTensor& tensor : tensors) {
    auto [it, fresh] = layouts.try_emplace(keys.Key(tensor));
    if (fresh) {
      absl::StatusOr<std::shared_ptr<const ReshardLayoutPlan>> layout = PlanLayout(tensor, options);
      if (!layout.ok()) return layout.status();
      it->second.first = *std::move(layout);
    }
    ++it->second.second;
    const ReshardLayoutPlan& lp = *it->second.first;
    const std::pair<int64_t*, int64_t> adds[] = {
        {&stats.wire_bytes, lp.stats.wire_bytes},
        {&stats.self_bytes, lp.stats.self_bytes},
        {&stats.optimum_bytes, lp.stats.optimum_bytes},
        {&stats.messages, lp.stats.messages},
        {&stats.self_messages, lp.stats.self_messages},
        {&stats.internode_bytes, lp.stats.internode_bytes}};
    for (const auto& [total, add] : adds) SDRT_RETURN_IF_ERROR(CheckedAdd(*total, add, tensor));
    plan.tensors.push_back({tensor.name, tensor.dtype, tensor.shape, it->second.first});
  }
  absl::flat_hash_map<int64_t, int64_t> sent, received;
  for (const auto& [key, layout] : layouts) {
    SDRT_RETURN_IF_ERROR(AddPerRank(layout.first->sent, layout.second, sent));
    SDRT_RETURN_IF_ERROR(AddPerRank(layout.first->received, layout.second, received));
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
