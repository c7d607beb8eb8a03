#include "sdrt/core/distributed/internal/engine/layout_messages.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "sdrt/core/distributed/internal/engine/grid.h"
#include "sdrt/core/distributed/internal/engine/split.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The highest rank of the layout's pieces plus one: below kMaxMeshRanks, so dense.
int64_t RanksOf(const SideOutline& source, const SideOutline& destination) {
  int64_t ranks = 0;
  for (const SideOutline* side : {&source, &destination}) {
    for (const OutlinePiece& piece : side->pieces()) ranks = std::max(ranks, piece.rank + 1);
  }
  return ranks;
}

// The node ids below kMaxMeshRanks, plus one: those are dense too.
int64_t NodesOf(const TransferPlanOptions& options) {
  int64_t nodes = 0;
  for (int64_t node : options.node_of_rank) {
    if (node >= 0 && node < kMaxMeshRanks) nodes = std::max(nodes, node + 1);
  }
  return nodes;
}

// A move's sending rank and contribution (a forward's: its relay's, 0), of a TransferMove
// or a PlannedMove.
template <typename Move>
int64_t FromOf(const SideOutline& source, const SideOutline& destination, const Move& m) {
  return m.forward ? destination[m.source].rank : source[m.source].rank;
}
template <typename Move>
int64_t ContributionOf(const SideOutline& source, const Move& m) {
  return m.forward ? int64_t{0} : source[m.source].contribution;
}

// A message's key: (forward, contribution, from, to) packed (contribution and ranks below
// 2^20, kMaxMeshRanks).
template <typename Move>
uint64_t MessageKey(const SideOutline& source, const SideOutline& destination, const Move& m) {
  return (uint64_t{m.forward} << 62) | (static_cast<uint64_t>(ContributionOf(source, m)) << 40) |
         (static_cast<uint64_t>(FromOf(source, destination, m)) << 20) |
         static_cast<uint64_t>(destination[m.destination].rank);
}

}  // namespace

PerRankBytes::PerRankBytes(int64_t dense) : bytes_(static_cast<size_t>(dense), kUnset) {
  indices_.reserve(bytes_.size());  // most layouts of a world add to most ranks
}

int64_t& PerRankBytes::SparseSlot(int64_t index) {
  int64_t& total = sparse_.try_emplace(index, kUnset).first->second;
  if (total == kUnset) {
    total = 0;
    indices_.push_back(index);
  }
  return total;
}

bool PerRankBytes::AddTimes(const std::vector<std::pair<int64_t, int64_t>>& list, int64_t times) {
  // Grown to the list's largest index below kMaxMeshRanks; sums kept in the map for
  // indices the array now covers move into it (an index is in one place or the other).
  int64_t top = -1;
  for (auto it = list.rbegin(); it != list.rend(); ++it) {
    if (it->first < kMaxMeshRanks) {
      top = it->first;
      break;
    }
  }
  if (top >= static_cast<int64_t>(bytes_.size())) {
    bytes_.resize(static_cast<size_t>(top) + 1, kUnset);
    for (auto it = sparse_.begin(); it != sparse_.end();) {
      if (it->first >= 0 && it->first <= top) {
        bytes_[static_cast<size_t>(it->first)] = it->second;
        sparse_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (const auto& [index, bytes] : list) {
    int64_t& total = Slot(index);
    int64_t scaled = 0;
    if (__builtin_mul_overflow(bytes, times, &scaled) ||
        __builtin_add_overflow(total, scaled, &total)) {
      return false;
    }
  }
  return true;
}

int64_t PerRankBytes::Max() const {
  int64_t most = 0;
  for (int64_t i : indices_) most = std::max(most, At(i));
  return most;
}

void PerRankBytes::List(std::vector<std::pair<int64_t, int64_t>>& out) {
  out.clear();
  out.reserve(indices_.size());
  if (sparse_.empty() && indices_.size() * 8 >= bytes_.size()) {
    // Most of the dense indices: read in order rather than sorted.
    for (size_t i = 0; i < bytes_.size(); ++i) {
      if (bytes_[i] != kUnset) out.emplace_back(static_cast<int64_t>(i), bytes_[i]);
    }
    return;
  }
  std::sort(indices_.begin(), indices_.end());
  for (int64_t i : indices_) out.emplace_back(i, At(i));
}

LayoutMessages::LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                               const SideOutline& source, const SideOutline& destination,
                               TransferLayoutPlan& tp)
    : LayoutMessages(tensor, options, source, destination, tp, RanksOf(source, destination),
                     NodesOf(options)) {}

LayoutMessages::LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                               const SideOutline& source, const SideOutline& destination,
                               TransferLayoutPlan& tp, int64_t ranks, int64_t nodes)
    : tensor_(tensor),
      options_(options),
      source_(source),
      destination_(destination),
      tp_(tp),
      sent_(ranks),
      received_(ranks),
      node_sent_(nodes),
      node_received_(nodes),
      counted_by_(static_cast<size_t>(ranks), -1),
      forwarded_by_(counted_by_) {
  std::vector<bool> seen(counted_by_.size());
  for (const OutlinePiece& piece : destination.pieces()) {
    if (seen[static_cast<size_t>(piece.rank)]) one_piece_per_rank_ = false;
    seen[static_cast<size_t>(piece.rank)] = true;
  }
}

absl::Status LayoutMessages::Count(int destination, std::vector<PlannedMove>& moves) {
  TransferPlanStats& stats = tp_.stats;
  const int64_t to = destination_[destination].rank;
  const size_t ndim = tensor_.shape.size();
  for (const PlannedMove& move : moves) {
    const int64_t from = FromOf(source_, destination_, move);
    if (one_piece_per_rank_ && ContributionOf(source_, move) == 0) {
      int& counted = (move.forward ? forwarded_by_ : counted_by_)[static_cast<size_t>(from)];
      if (counted != destination) ++(from == to ? stats.self_messages : stats.messages);
      counted = destination;
    } else {
      keys_.push_back(MessageKey(source_, destination_, move));
    }
    if (!options_.node_of_rank.empty() && NodeOf(from) != NodeOf(to)) {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.internode_bytes, move.bytes, tensor_));
      SDRT_RETURN_IF_ERROR(node_sent_.Add(NodeOf(from), move.bytes, tensor_));
      SDRT_RETURN_IF_ERROR(node_received_.Add(NodeOf(to), move.bytes, tensor_));
    }
    if (from == to) {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.self_bytes, move.bytes, tensor_));
    } else {
      SDRT_RETURN_IF_ERROR(TransferAdd(stats.wire_bytes, move.bytes, tensor_));
      SDRT_RETURN_IF_ERROR(sent_.Add(from, move.bytes, tensor_));
      SDRT_RETURN_IF_ERROR(received_.Add(to, move.bytes, tensor_));
    }
    if (options_.rank < 0 || from == options_.rank || to == options_.rank) {
      kept_.push_back({move.source, move.destination, IntVector(move.begin, move.begin + ndim),
                       IntVector(move.end, move.end + ndim), move.bytes, move.forward});
    }
  }
  moves.clear();
  return absl::OkStatus();
}

absl::Status LayoutMessages::Finish() {
  TransferPlanStats& stats = tp_.stats;
  std::sort(keys_.begin(), keys_.end());
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (i > 0 && keys_[i] == keys_[i - 1]) continue;
    const bool self = ((keys_[i] >> 20) & 0xFFFFF) == (keys_[i] & 0xFFFFF);
    ++(self ? stats.self_messages : stats.messages);
  }
  // One message per (source rank, destination rank), forwards last, contribution 0 first,
  // its moves in piece and box order: sorted by small keys, the boxes compared on ties.
  struct Order {
    uint64_t message;
    int source, destination;
    uint32_t index;
  };
  std::vector<Order> order(kept_.size());
  for (size_t i = 0; i < kept_.size(); ++i) {
    const TransferMove& m = kept_[i];
    order[i] = {MessageKey(source_, destination_, m), m.source, m.destination,
                static_cast<uint32_t>(i)};
  }
  std::sort(order.begin(), order.end(), [&](const Order& a, const Order& b) {
    if (a.message != b.message) return a.message < b.message;
    if (a.source != b.source) return a.source < b.source;
    if (a.destination != b.destination) return a.destination < b.destination;
    return kept_[a.index].begin < kept_[b.index].begin;
  });
  size_t messages = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    messages += i == 0 || order[i].message != order[i - 1].message ? 1 : 0;
  }
  tp_.messages.reserve(messages);
  // Appends a move to its message, opening the message when it is not the last one.
  const auto add_to_messages = [&](TransferMove move) -> absl::Status {
    const int64_t from = FromOf(source_, destination_, move);
    const int64_t to = destination_[move.destination].rank;
    const int64_t contribution = ContributionOf(source_, move);
    if (tp_.messages.empty() || tp_.messages.back().forward != move.forward ||
        tp_.messages.back().source_rank != from || tp_.messages.back().destination_rank != to ||
        tp_.messages.back().contribution != contribution) {
      tp_.messages.push_back({from, to, contribution, {}, 0, move.forward});
    }
    TransferMessage& message = tp_.messages.back();
    SDRT_RETURN_IF_ERROR(TransferAdd(message.bytes, move.bytes, tensor_));
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
      SDRT_RETURN_IF_ERROR(add_to_messages(std::move(kept_[order[i].index])));
      i = j;
      continue;
    }
    run.clear();
    for (size_t k = i; k < j; ++k) run.push_back(std::move(kept_[order[k].index]));
    MergeAdjacentBoxes(run);
    std::sort(run.begin(), run.end(),
              [](const TransferMove& a, const TransferMove& b) { return a.begin < b.begin; });
    for (TransferMove& move : run) SDRT_RETURN_IF_ERROR(add_to_messages(std::move(move)));
    i = j;
  }
  kept_.clear();
  sent_.List(tp_.sent);
  received_.List(tp_.received);
  node_sent_.List(tp_.node_sent);
  node_received_.List(tp_.node_received);
  return absl::OkStatus();
}

}  // namespace sdrt::internal
