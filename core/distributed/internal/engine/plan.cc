#include "sdrt/core/distributed/internal/engine/plan.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/collective_plan.h"
#include "sdrt/core/distributed/internal/engine/grid.h"
#include "sdrt/core/distributed/internal/engine/layout_messages.h"
#include "sdrt/core/distributed/internal/engine/pieces.h"
#include "sdrt/core/distributed/internal/engine/split.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The most pieces a plan keeps made for later layouts: 1,024 sides of 1,024 ranks.
constexpr int64_t kCachedPieces = int64_t{1} << 20;
// The most destination cells a layout's walk keeps for the later pieces of their boxes
// (about 10 MB).
constexpr int64_t kKeptCells = int64_t{1} << 16;

// Plans one tensor: its moves, counted into `out` destination piece by destination piece,
// and its optimum bytes.
absl::Status PlanTensor(const TransferTensor& tensor, const SideOutline& source,
                        const SideOutline& destination, int64_t contributions,
                        const TransferPlanOptions& options, LayoutMessages& out, int64_t& optimum) {
  const Grid grid = MakeGrid(tensor.shape, source, destination);
  int64_t budget = options.max_cells;
  for (int64_t c : grid.counts) {
    if (c == 0) return absl::OkStatus();  // no elements
  }
  auto too_many = [&] {
    return TransferInvalid(tensor,
                           absl::StrCat("the common refinement has more than ", options.max_cells,
                                        " cells (the planner's max_cells)"));
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
  if (!CoverCells(grid, cells, source, budget, first, holders)) return too_many();
  // With fan-out, the destination pieces covering each cell likewise.
  // With nodes, holders on a piece's node send when there are any; a cell that several
  // pieces of one node need and none holds enters the node once (fan-out), unless the
  // destination has no such cells.
  const bool nodes = !options.node_of_rank.empty() && contributions == 1;
  const bool fan_out = nodes && !destination.replicas_apart;
  std::vector<int64_t> needs_first;
  std::vector<int> needs;
  if (fan_out && !CoverCells(grid, cells, destination, budget, needs_first, needs)) {
    return too_many();
  }
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(options.node_of_rank.size()) ? options.node_of_rank[rank]
                                                                    : -1 - rank;
  };
  const NodeGroups groups =
      fan_out ? GroupByNode(needs_first, needs, destination, node_of) : NodeGroups();
  // Per cell, where the walk's next destination piece is in its `needs` list.
  std::vector<int64_t> next_need;
  if (fan_out) next_need.assign(needs_first.begin(), needs_first.end() - 1);
  std::vector<int> group, on_node;
  // Wire bytes each source rank sends so far, by rank.
  int64_t ranks = 0;
  for (const OutlinePiece& piece : source.pieces()) ranks = std::max(ranks, piece.rank + 1);
  std::vector<int64_t> sent(static_cast<size_t>(ranks));
  // A cell's moves, counted as soon as made (their boxes are read from the cell's, its
  // slabs' and `scratch`'s, which the next cell or contribution may cut again).
  std::vector<PlannedMove> moves;
  FanOutScratch scratch;
  // The pieces of each destination box that take something: they need its cells alike.
  std::vector<int64_t> replicas(destination.boxes.size());
  for (const OutlinePiece& piece : destination.pieces()) {
    if (!piece.identity) ++replicas[static_cast<size_t>(piece.box)];
  }
  // The destination's cells, per box: each cell's bounds, bytes and slabs made once.
  WalkCells destination_cells(grid, tensor.dtype, destination, kKeptCells);
  for (size_t p = 0; p < destination.size(); ++p) {
    const OutlinePiece& dst = destination[p];
    if (dst.identity) continue;
    std::vector<GridCell>* cells_of_piece = destination_cells.Of(p, budget);
    if (cells_of_piece == nullptr) return too_many();
    budget -= static_cast<int64_t>(cells_of_piece->size());
    for (GridCell& grid_cell : *cells_of_piece) {
      const int64_t cell = grid_cell.cell;
      const IntVector& begin = grid_cell.begin;
      const IntVector& end = grid_cell.end;
      const absl::Span<const int> held(holders.data() + first[cell],
                                       static_cast<size_t>(first[cell + 1] - first[cell]));
      if (held.empty()) {
        if (tensor.allow_uncovered) continue;
        return TransferInvalid(
            tensor, absl::StrCat("destination rank ", dst.rank, " needs [", ShapeToString(begin),
                                 ", ", ShapeToString(end), ") that no source rank holds"));
      }
      if (grid_cell.bytes < 0) {
        return TransferInvalid(tensor, BoxBytes(tensor.dtype, begin, end).status().message());
      }
      const int64_t bytes = grid_cell.bytes;
      // Fan-out: no holder on this piece's node, and other pieces on the node need the
      // cell too: they share it, each relaying a block of it to the others.
      if (fan_out && groups.shared[static_cast<size_t>(cell)] != 0 &&
          std::none_of(held.begin(), held.end(),
                       [&](int h) { return node_of(source[h].rank) == node_of(dst.rank); })) {
        // This piece's entry in the cell's list (pieces come in order: from the last
        // piece's entry on; the piece is in the list, since it covers the cell).
        int64_t& entry = next_need[static_cast<size_t>(cell)];
        while (needs[static_cast<size_t>(entry)] != static_cast<int>(p)) ++entry;
        const auto at = static_cast<size_t>(entry);
        if (groups.count[at] > 1) {
          SDRT_RETURN_IF_ERROR(TransferAdd(optimum, bytes, tensor));
          const absl::Status shared = FanOutCell(
              tensor.dtype, tensor.shape, source, destination, held,
              absl::MakeConstSpan(groups.members).subspan(groups.first[at], groups.count[at]),
              static_cast<int>(p), cell, cells < groups.count[at], begin, end, scratch, sent,
              moves);
          if (!shared.ok()) return TransferInvalid(tensor, shared.message());
          SDRT_RETURN_IF_ERROR(out.Count(static_cast<int>(p), moves));
          continue;
        }
      }
      // The holders by contribution (stable: piece order within one): all of them for one.
      absl::Span<const int> by_contribution = held;
      if (contributions > 1) {
        group.assign(held.begin(), held.end());
        std::stable_sort(group.begin(), group.end(), [&](int a, int b) {
          return source[a].contribution < source[b].contribution;
        });
        by_contribution = group;
      }
      size_t at = 0;
      for (int64_t c = 0; c < contributions; ++c) {
        const size_t from = at;
        if (contributions == 1) at = held.size();
        while (at < by_contribution.size() && source[by_contribution[at]].contribution == c) ++at;
        if (at == from) {
          return TransferInvalid(
              tensor, absl::StrCat("destination rank ", dst.rank, " needs [", ShapeToString(begin),
                                   ", ", ShapeToString(end), ") of Partial contribution ", c,
                                   " that no source rank holds"));
        }
        SDRT_RETURN_IF_ERROR(TransferAdd(optimum, bytes, tensor));
        const absl::Span<const int> holders_c = by_contribution.subspan(from, at - from);
        const auto self = std::find_if(holders_c.begin(), holders_c.end(),
                                       [&](int h) { return source[h].rank == dst.rank; });
        if (self != holders_c.end()) {
          moves.push_back({*self, static_cast<int>(p), begin.data(), end.data(), bytes});
          optimum -= bytes;
          SDRT_RETURN_IF_ERROR(out.Count(static_cast<int>(p), moves));
          continue;
        }
        absl::Span<const int> senders = holders_c;
        if (nodes) {
          on_node.clear();
          for (int h : holders_c) {
            if (node_of(source[h].rank) == node_of(dst.rank)) on_node.push_back(h);
          }
          if (!on_node.empty()) senders = on_node;
        }
        const absl::Status split = SplitAmongHolders(
            tensor.dtype, tensor.shape, source, senders, static_cast<int>(p),
            replicas[static_cast<size_t>(dst.box)], begin, end, grid_cell.slabs, sent, moves);
        if (!split.ok()) return TransferInvalid(tensor, split.message());
        SDRT_RETURN_IF_ERROR(out.Count(static_cast<int>(p), moves));
      }
    }
  }
  return absl::OkStatus();
}

// Plans the layout of `tensor`: its pieces (from `pieces` when a side was made before, by
// its key), its messages (those of `rank` only, and only the pieces `rank` uses, unless
// -1) and the stats of one such tensor.
absl::StatusOr<std::shared_ptr<const TransferLayoutPlan>> PlanLayout(
    const TransferTensor& tensor, const TransferPlanOptions& options, const std::string& source_key,
    const std::string& destination_key, PieceCache& pieces) {
  auto layout = std::make_shared<TransferLayoutPlan>();
  TransferLayoutPlan& tp = *layout;
  LayoutOutlines sides;
  SDRT_RETURN_IF_ERROR(LayoutPieces(tensor, source_key, destination_key, pieces, tp, sides));
  SDRT_ASSIGN_OR_RETURN(const bool collective,
                        PlanCollective(tensor, options, *sides.source, *sides.destination, tp));
  if (!collective) {
    LayoutMessages messages(tensor, options, *sides.source, *sides.destination, tp);
    SDRT_RETURN_IF_ERROR(PlanTensor(tensor, *sides.source, *sides.destination, tp.contributions,
                                    options, messages, tp.stats.optimum_bytes));
    SDRT_RETURN_IF_ERROR(messages.Finish());
  }
  KeepPieces(options.rank, sides, source_key, destination_key, pieces, tp);
  return std::shared_ptr<const TransferLayoutPlan>(std::move(layout));
}

// The bytes that decide a tensor's layout plan: both sides' keys (each: dtype, shape,
// which side, its layout, a mesh by an id given to each distinct (shape, ranks)) and
// allow_uncovered. A side's key alone decides its pieces (PieceCache).
class LayoutKeys {
 public:
  std::string SideKey(const TransferTensor& tensor, bool source) {
    std::string key;
    PutU64(&key, static_cast<uint64_t>(tensor.dtype) | (source ? 1u << 16 : 0u));
    PutU64(&key, tensor.shape.size());
    for (int64_t s : tensor.shape) PutU64(&key, static_cast<uint64_t>(s));
    const TransferLayout& side = source ? tensor.source : tensor.destination;
    PutU64(&key, side.mesh == nullptr ? 0 : 1 + MeshId(*side.mesh));
    PutU64(&key, side.placements.size());
    for (const Placement& p : side.placements) {
      PutU64(&key, static_cast<uint64_t>(p.kind()));
      PutU64(&key, static_cast<uint64_t>(p.dim()));
      PutU64(&key, static_cast<uint64_t>(p.split_factor()));
      PutU64(&key, static_cast<uint64_t>(p.reduce_op()));
    }
    PutU64(&key, side.boxes.size());
    for (const TransferBox& box : side.boxes) {
      PutU64(&key, static_cast<uint64_t>(box.rank));
      PutU64(&key, box.offsets.size());
      for (int64_t v : box.offsets) PutU64(&key, static_cast<uint64_t>(v));
      PutU64(&key, box.sizes.size());
      for (int64_t v : box.sizes) PutU64(&key, static_cast<uint64_t>(v));
    }
    return key;
  }

  // The layout's key from its sides' keys.
  static std::string Key(const TransferTensor& tensor, const std::string& source_key,
                         const std::string& destination_key) {
    std::string key;
    PutU64(&key, tensor.allow_uncovered ? 1 : 0);
    PutU64(&key, source_key.size());
    return absl::StrCat(key, source_key, destination_key);
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

// The per-rank (per-node) lists of a layout: sent, received, node_sent, node_received.
const std::vector<std::pair<int64_t, int64_t>>& ListOf(const TransferLayoutPlan& lp, int i) {
  const std::vector<std::pair<int64_t, int64_t>>* lists[4] = {&lp.sent, &lp.received, &lp.node_sent,
                                                              &lp.node_received};
  return *lists[i];
}

// Adds a layout's lists `times` over into `totals`.
absl::Status AddLists(const TransferLayoutPlan& lp, int64_t times, PerRankBytes* totals) {
  for (int i = 0; i < 4; ++i) {
    if (!totals[i].AddTimes(ListOf(lp, i), times)) {
      return absl::InvalidArgumentError("reshard: bytes moved by one rank overflow int64");
    }
  }
  return absl::OkStatus();
}

// Whether `a` and `b` have the same layout plan: the inputs of LayoutKeys::Key compared
// directly, meshes by address (a state dict's tensors share a few mesh objects). Cheaper than
// a key, and true for most neighbours (every layer of a model repeats the last one's).
bool SameLayoutInputs(const TransferTensor& a, const TransferTensor& b) {
  const auto same_side = [](const TransferLayout& x, const TransferLayout& y) {
    return x.mesh == y.mesh && x.placements == y.placements &&
           std::equal(x.boxes.begin(), x.boxes.end(), y.boxes.begin(), y.boxes.end(),
                      [](const TransferBox& p, const TransferBox& q) {
                        return p.rank == q.rank && p.offsets == q.offsets && p.sizes == q.sizes;
                      });
  };
  return a.dtype == b.dtype && a.allow_uncovered == b.allow_uncovered && a.shape == b.shape &&
         same_side(a.source, b.source) && same_side(a.destination, b.destination);
}

}  // namespace

absl::StatusOr<TransferPlan> PlanTransfer(std::vector<TransferTensor> tensors,
                                          const TransferPlanOptions& options) {
  TransferPlan plan;
  plan.rank = options.rank < 0 ? -1 : options.rank;
  plan.world_size = options.world_size;
  TransferPlanStats& stats = plan.stats;
  LayoutKeys keys;
  PieceCache pieces(kCachedPieces, options.node_of_rank);  // each distinct side's, made once
  // Each distinct layout once, with the number of tensors that share it.
  using Entry = std::pair<std::shared_ptr<const TransferLayoutPlan>, int64_t>;
  absl::node_hash_map<std::string, Entry> layouts;  // entries stay where they are
  plan.tensors.reserve(tensors.size());
  Entry* last = nullptr;  // the previous tensor's layout
  // Per rank and per node, the bytes of every layout times its tensors: a layout's lists
  // added once as it is planned (while they are in the cache), its further tensors' at the
  // end.
  PerRankBytes totals[4] = {PerRankBytes(0), PerRankBytes(0), PerRankBytes(0), PerRankBytes(0)};
  for (size_t i = 0; i < tensors.size(); ++i) {
    TransferTensor& tensor = tensors[i];
    // A cast: the layout is planned in the wire's dtype, the narrower of the two.
    std::optional<TransferCast> cast;
    if (tensor.destination_dtype.has_value() && *tensor.destination_dtype != tensor.dtype) {
      cast = TransferCast{tensor.dtype, *tensor.destination_dtype};
      for (const Placement& p : tensor.source.placements) {
        if (p.is_partial()) {  // refused before the layout is planned in another dtype
          return absl::InvalidArgumentError(
              absl::StrCat("reshard of '", tensor.name, "': a Partial source is not cast (from ",
                           DTypeName(cast->source), " to ", DTypeName(cast->destination), ")"));
        }
      }
      if (CastKindOf(cast->source) != CastKind::kFloat ||
          CastKindOf(cast->destination) != CastKind::kFloat) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshard of '", tensor.name, "': no cast from ", DTypeName(cast->source),
                         " to ", DTypeName(cast->destination),
                         " (only between bfloat16, float16, float32, float64 and the "
                         "float8 formats e4m3fn, e5m2, e8m0fnu)"));
      }
      if (ElementBits(cast->destination) < ElementBits(cast->source)) {
        tensor.dtype = cast->destination;
      }
    }
    tensor.destination_dtype.reset();
    Entry* entry = last;
    if (entry == nullptr || !SameLayoutInputs(tensor, tensors[i - 1])) {
      const std::string source_key = keys.SideKey(tensor, /*source=*/true);
      const std::string destination_key = keys.SideKey(tensor, /*source=*/false);
      auto [it, fresh] = layouts.try_emplace(LayoutKeys::Key(tensor, source_key, destination_key));
      if (fresh) {
        absl::StatusOr<std::shared_ptr<const TransferLayoutPlan>> layout =
            PlanLayout(tensor, options, source_key, destination_key, pieces);
        if (!layout.ok()) return layout.status();
        it->second.first = *std::move(layout);
        SDRT_RETURN_IF_ERROR(AddLists(*it->second.first, 1, totals));
      }
      entry = &it->second;
    }
    last = entry;
    ++entry->second;
    const TransferLayoutPlan& lp = *entry->first;
    const std::pair<int64_t*, int64_t> adds[] = {
        {&stats.wire_bytes, lp.stats.wire_bytes},
        {&stats.self_bytes, lp.stats.self_bytes},
        {&stats.optimum_bytes, lp.stats.optimum_bytes},
        {&stats.messages, lp.stats.messages},
        {&stats.self_messages, lp.stats.self_messages},
        {&stats.internode_bytes, lp.stats.internode_bytes}};
    for (const auto& [total, add] : adds) SDRT_RETURN_IF_ERROR(TransferAdd(*total, add, tensor));
    plan.tensors.push_back(
        {std::move(tensor.name), tensor.dtype, tensor.shape, entry->first, cast});
  }
  for (const auto& [key, layout] : layouts) {
    if (layout.second > 1) SDRT_RETURN_IF_ERROR(AddLists(*layout.first, layout.second - 1, totals));
  }
  int64_t* const maxima[4] = {&stats.max_sent_bytes, &stats.max_received_bytes,
                              &stats.max_node_sent_bytes, &stats.max_node_received_bytes};
  for (int i = 0; i < 4; ++i) *maxima[i] = totals[i].Max();
  return plan;
}

}  // namespace sdrt::internal
