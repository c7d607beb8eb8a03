#include "sdrt/core/distributed/internal/engine/collective_plan.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/grid.h"
#include "sdrt/core/distributed/internal/engine/split.h"

namespace sdrt::internal {
namespace {

bool IsWhole(const SideOutline& side, size_t p, IntSpan shape) {
  if (side[p].identity || side.runs(p).size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    const IndexRuns& runs = side.runs(p)[d];
    if (runs.size() != 1 || runs[0].global != 0 || runs[0].length != shape[d]) return false;
  }
  return true;
}

// The destination piece of each rank 0 .. world - 1 when the destination is the whole
// tensor on every one of them (one piece each); empty otherwise.
std::vector<int> WholeOnEveryRank(const SideOutline& destination, IntSpan shape, int64_t world) {
  if (static_cast<int64_t>(destination.size()) != world) return {};
  std::vector<int> piece_of(static_cast<size_t>(world), -1);
  for (size_t p = 0; p < destination.size(); ++p) {
    const OutlinePiece& piece = destination[p];
    if (piece.rank < 0 || piece.rank >= world || piece_of[piece.rank] >= 0 ||
        !IsWhole(destination, p, shape)) {
      return {};
    }
    piece_of[piece.rank] = static_cast<int>(p);
  }
  return piece_of;
}

// The broadcast root's whole source piece, or -1 when the pieces holding elements are not
// all on one rank or none of them is the whole tensor.
int BroadcastSource(const SideOutline& source, IntSpan shape) {
  int whole = -1;
  int64_t root = -1;
  for (size_t s = 0; s < source.size(); ++s) {
    const OutlinePiece& piece = source[s];
    if (RunsNumel(source.runs(s)) == 0) continue;
    if (root >= 0 && piece.rank != root) return -1;
    root = piece.rank;
    if (whole < 0 && IsWhole(source, s, shape)) whole = static_cast<int>(s);
  }
  return whole;
}

}  // namespace

absl::StatusOr<bool> PlanCollective(const TransferTensor& tensor,
                                    const TransferPlanOptions& options, const SideOutline& source,
                                    const SideOutline& destination, TransferLayoutPlan& tp) {
  const int64_t world = options.world_size;
  if (world < 2 || tp.contributions != 1 || !(options.broadcast || options.all_gather)) {
    return false;
  }
  SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(tensor.shape));
  if (numel == 0) return false;
  const std::vector<int> piece_of = WholeOnEveryRank(destination, tensor.shape, world);
  if (piece_of.empty()) return false;
  const IntVector origin(tensor.shape.size(), 0);
  SDRT_ASSIGN_OR_RETURN(const int64_t total, BoxBytes(tensor.dtype, origin, tensor.shape));
  const int receiver = piece_of[0];  // every rank's piece is alike; moves name rank 0's
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(options.node_of_rank.size()) ? options.node_of_rank[rank]
                                                                    : -1 - rank;
  };
  std::vector<TransferMove> moves;
  // held[r]: the bytes rank r holds of the tensor itself (for the optimum).
  absl::flat_hash_map<int64_t, int64_t> held;
  const int root = options.broadcast ? BroadcastSource(source, tensor.shape) : -1;
  if (root >= 0) {
    tp.collective = Collective::kBroadcast;
    tp.root = source[root].rank;
    moves.push_back({root, receiver, origin, tensor.shape, total});
    held[tp.root] = total;
  } else if (options.all_gather) {
    tp.collective = Collective::kAllGather;
    const Grid grid = MakeGrid(tensor.shape, source, destination);
    int64_t cells = 1;
    for (int64_t c : grid.counts) cells *= c;  // <= numel: no overflow
    int64_t budget = options.max_cells - cells;
    std::vector<int64_t> first;
    std::vector<int> holders;
    Cover cover;
    if (budget < 0 || !CoverCells(grid, cells, source, budget, first, holders) ||
        CoverOf(grid, destination.runs(receiver), budget, cover) < 0) {
      return TransferInvalid(tensor, absl::StrCat("the common refinement has more than ",
                                                  options.max_cells, " cells"));
    }
    IntVector begin(tensor.shape.size()), end(tensor.shape.size());
    std::vector<int64_t> ranks;
    SDRT_RETURN_IF_ERROR(ForEachCell(grid, cover, [&](int64_t cell, IntSpan index) {
      for (size_t d = 0; d < index.size(); ++d) {
        begin[d] = grid.cuts[d][index[d]];
        end[d] = grid.cuts[d][index[d] + 1];
      }
      if (first[cell] == first[cell + 1]) {
        if (tensor.allow_uncovered) return absl::OkStatus();
        return TransferInvalid(tensor, absl::StrCat("[", ShapeToString(begin), ", ",
                                                    ShapeToString(end),
                                                    ") is needed and no source rank holds it"));
      }
      absl::StatusOr<int64_t> bytes = BoxBytes(tensor.dtype, begin, end);
      if (!bytes.ok()) return TransferInvalid(tensor, bytes.status().message());
      moves.push_back({holders[first[cell]], receiver, begin, end, *bytes});
      ranks.clear();
      for (int64_t i = first[cell]; i < first[cell + 1]; ++i) {
        ranks.push_back(source[holders[i]].rank);
      }
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      for (int64_t r : ranks) SDRT_RETURN_IF_ERROR(TransferAdd(held[r], *bytes, tensor));
      return absl::OkStatus();
    }));
    MergeMoves(moves);
  } else {
    return false;
  }
  // One message per sending rank, in rank order, its moves in piece and box order.
  std::sort(moves.begin(), moves.end(), [&](const TransferMove& a, const TransferMove& b) {
    return std::make_tuple(source[a.source].rank, a.source, std::cref(a.begin)) <
           std::make_tuple(source[b.source].rank, b.source, std::cref(b.begin));
  });
  TransferPlanStats& stats = tp.stats;
  absl::flat_hash_map<int64_t, int64_t> sent, received;
  for (TransferMove& move : moves) {
    const int64_t from = source[move.source].rank;
    if (tp.messages.empty() || tp.messages.back().source_rank != from) {
      tp.messages.push_back({from, kEveryRank, 0, {}, 0, false});
      stats.messages += world - 1;
      ++stats.self_messages;
    }
    TransferMessage& message = tp.messages.back();
    SDRT_RETURN_IF_ERROR(TransferAdd(message.bytes, move.bytes, tensor));
    int64_t wire = 0, internode = 0;
    if (__builtin_mul_overflow(move.bytes, world - 1, &wire)) {
      return TransferInvalid(tensor, "byte counts overflow");
    }
    for (int64_t r = 0; r < world && !options.node_of_rank.empty(); ++r) {
      if (node_of(r) != node_of(from)) internode += move.bytes;
    }
    SDRT_RETURN_IF_ERROR(TransferAdd(stats.wire_bytes, wire, tensor));
    SDRT_RETURN_IF_ERROR(TransferAdd(stats.self_bytes, move.bytes, tensor));
    SDRT_RETURN_IF_ERROR(TransferAdd(stats.internode_bytes, internode, tensor));
    SDRT_RETURN_IF_ERROR(TransferAdd(sent[from], wire, tensor));
    for (int64_t r = 0; r < world; ++r) {
      if (r != from) SDRT_RETURN_IF_ERROR(TransferAdd(received[r], move.bytes, tensor));
    }
    message.moves.push_back(std::move(move));
  }
  for (int64_t r = 0; r < world; ++r) {
    SDRT_RETURN_IF_ERROR(TransferAdd(stats.optimum_bytes, total - held[r], tensor));
  }
  tp.sent.assign(sent.begin(), sent.end());
  tp.received.assign(received.begin(), received.end());
  std::sort(tp.sent.begin(), tp.sent.end());
  std::sort(tp.received.begin(), tp.received.end());
  return true;
}

}  // namespace sdrt::internal
