#include "sdrt/core/distributed/internal/engine/layout_messages.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "sdrt/core/distributed/internal/engine/grid.h"
#include "sdrt/core/distributed/internal/engine/split.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Bytes per rank (or node) of one layout, with which indices were added to: a layout's
// sent, received, node_sent and node_received lists. Dense below `dense` (ranks, and node
// ids that are small numbers), in a map otherwise (node ids are the caller's).
class PerRankBytes {
 public:
  explicit PerRankBytes(int64_t dense) : bytes_(static_cast<size_t>(dense), kUnset) {}

  absl::Status Add(int64_t index, int64_t bytes, const TransferTensor& tensor) {
    int64_t* total = nullptr;
    if (index >= 0 && index < static_cast<int64_t>(bytes_.size())) {
      total = &bytes_[static_cast<size_t>(index)];
    } else {
      total = &sparse_.try_emplace(index, kUnset).first->second;
    }
    if (*total == kUnset) {
      *total = 0;
      indices_.push_back(index);
    }
    return TransferAdd(*total, bytes, tensor);
  }

  // (index, bytes) of every index added to, by index.
  void List(std::vector<std::pair<int64_t, int64_t>>& out) {
    std::sort(indices_.begin(), indices_.end());
    out.clear();
    out.reserve(indices_.size());
    for (int64_t i : indices_) {
      const bool dense = i >= 0 && i < static_cast<int64_t>(bytes_.size());
      out.emplace_back(i, dense ? bytes_[static_cast<size_t>(i)] : sparse_.at(i));
    }
  }

 private:
  // Not added to yet (sums are >= 0).
  static constexpr int64_t kUnset = -1;

  std::vector<int64_t> bytes_;
  absl::flat_hash_map<int64_t, int64_t> sparse_;
  std::vector<int64_t> indices_;
};

}  // namespace

absl::Status LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                            std::vector<TransferMove> moves, TransferLayoutPlan& tp) {
  // The stats count every move: merging the kept ones (below) changes neither the bytes nor
  // the set of (source rank, destination rank, contribution) that make the messages.
  TransferPlanStats& stats = tp.stats;
  // A move's sending rank and contribution (a forward's: its relay's, 0).
  auto from_of = [&](const TransferMove& m) {
    return m.forward ? tp.destination[m.source].rank : tp.source[m.source].rank;
  };
  auto contribution_of = [&](const TransferMove& m) {
    return m.forward ? int64_t{0} : tp.source[m.source].contribution;
  };
  auto node_of = [&](int64_t rank) {
    return rank < static_cast<int64_t>(options.node_of_rank.size()) ? options.node_of_rank[rank]
                                                                    : -1 - rank;
  };
  // Per rank (node) and side, dense: the pieces' ranks are below kMaxMeshRanks.
  int64_t ranks = 0;
  for (const auto* side : {&tp.source, &tp.destination}) {
    for (const TransferPiece& piece : *side) ranks = std::max(ranks, piece.rank + 1);
  }
  int64_t nodes = 0;  // node ids below kMaxMeshRanks are dense too
  for (int64_t node : options.node_of_rank) {
    if (node >= 0 && node < kMaxMeshRanks) nodes = std::max(nodes, node + 1);
  }
  PerRankBytes sent(ranks), received(ranks), node_sent(nodes), node_received(nodes);
  // Each message's key, counted once: (forward, contribution, from, to) packed (contribution
  // and ranks below 2^20, kMaxMeshRanks).
  const auto message_key = [&](const TransferMove& m, int64_t from, int64_t to) {
    return (uint64_t{m.forward} << 62) | (static_cast<uint64_t>(contribution_of(m)) << 40) |
           (static_cast<uint64_t>(from) << 20) | static_cast<uint64_t>(to);
  };
  std::vector<uint64_t> pairs;
  pairs.reserve(moves.size());
  std::vector<TransferMove> kept;
  for (TransferMove& move : moves) {
    const int64_t from = from_of(move);
    const int64_t to = tp.destination[move.destination].rank;
    pairs.push_back(message_key(move, from, to));
    if (!options.node_of_rank.empty() && node_of(from) != node_of(to)) {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.internode_bytes, move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(node_sent.Add(node_of(from), move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(node_received.Add(node_of(to), move.bytes, tensor));
    }
    if (from == to) {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.self_bytes, move.bytes, tensor));
    } else {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.wire_bytes, move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(sent.Add(from, move.bytes, tensor));
      SDRT_RETURN_IF_ERROR(received.Add(to, move.bytes, tensor));
    }
    if (options.rank >= 0 && (from == options.rank || to == options.rank)) {
      kept.push_back(std::move(move));
    }
  }
  if (options.rank < 0) kept = std::move(moves);  // every rank's
  std::sort(pairs.begin(), pairs.end());
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (i > 0 && pairs[i] == pairs[i - 1]) continue;
    const bool self = ((pairs[i] >> 20) & 0xFFFFF) == (pairs[i] & 0xFFFFF);
    ++(self ? stats.self_messages : stats.messages);
  }
  // One message per (source rank, destination rank), forwards last, contribution 0 first,
  // its moves in piece and box order: sorted by small keys, the boxes compared on ties.
  struct Order {
    uint64_t message;
    int source, destination;
    uint32_t index;
  };
  std::vector<Order> order(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    const TransferMove& m = kept[i];
    order[i] = {message_key(m, from_of(m), tp.destination[m.destination].rank), m.source,
                m.destination, static_cast<uint32_t>(i)};
  }
  std::sort(order.begin(), order.end(), [&](const Order& a, const Order& b) {
    if (a.message != b.message) return a.message < b.message;
    if (a.source != b.source) return a.source < b.source;
    if (a.destination != b.destination) return a.destination < b.destination;
    return kept[a.index].begin < kept[b.index].begin;
  });
  size_t messages = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    messages += i == 0 || order[i].message != order[i - 1].message ? 1 : 0;
  }
  tp.messages.reserve(messages);
  // Appends a move to its message, opening the message when it is not the last one.
  const auto add_to_messages = [&](TransferMove move) -> absl::Status {
    const int64_t from = from_of(move);
    const int64_t to = tp.destination[move.destination].rank;
    const int64_t contribution = contribution_of(move);
    if (tp.messages.empty() || tp.messages.back().forward != move.forward ||
        tp.messages.back().source_rank != from || tp.messages.back().destination_rank != to ||
        tp.messages.back().contribution != contribution) {
      tp.messages.push_back({from, to, contribution, {}, 0, move.forward});
    }
    TransferMessage& message = tp.messages.back();
    SDRT_RETURN_IF_ERROR(TransferAdd(message.bytes, move.bytes, tensor));
    message.moves.push_back(std::move(move));
    return absl::OkStatus();
  };
  // Moves of one (forward, source, destination) are neighbours now: a run of several is
  // merged (MergeAdjacentBoxes) and put back in box order.
  std::vector<TransferMove> run;
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    while (j < order.size() && order[j].message == order[i].message &&
           order[j].source == order[i].source && order[j].destination == order[i].destination) {
      ++j;
    }
    if (j - i == 1) {
      SDRT_RETURN_IF_ERROR(add_to_messages(std::move(kept[order[i].index])));
      i = j;
      continue;
    }
    run.clear();
    for (size_t k = i; k < j; ++k) run.push_back(std::move(kept[order[k].index]));
    MergeAdjacentBoxes(run);
    std::sort(run.begin(), run.end(),
              [](const TransferMove& a, const TransferMove& b) { return a.begin < b.begin; });
    for (TransferMove& move : run) SDRT_RETURN_IF_ERROR(add_to_messages(std::move(move)));
    i = j;
  }
  sent.List(tp.sent);
  received.List(tp.received);
  node_sent.List(tp.node_sent);
  node_received.List(tp.node_received);
  return absl::OkStatus();
}

}  // namespace sdrt::internal
