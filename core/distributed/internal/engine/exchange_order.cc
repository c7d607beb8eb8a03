#include "sdrt/core/distributed/internal/engine/exchange_order.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace sdrt::internal {
namespace {

using PerRank = std::vector<std::pair<int64_t, int64_t>>;

// One part when no sender of the tensor sends more than a bucket; else enough parts that
// its busiest sender sends at most half a bucket in one on average (its bytes need not be
// even over the receivers: SentInPart), at most one per receiver.
uint32_t PartCount(const TransferLayoutPlan& layout, int64_t bucket_bytes) {
  int64_t most = 0;
  for (const auto& [rank, bytes] : layout.sent) most = std::max(most, bytes);
  const int64_t parts = most <= bucket_bytes ? 1 : (2 * most + bucket_bytes - 1) / bucket_bytes;
  const auto receivers = static_cast<int64_t>(layout.received.size());
  return static_cast<uint32_t>(std::clamp<int64_t>(parts, 1, std::max<int64_t>(receivers, 1)));
}

// The receivers of part `part` of `parts`: list indices i with i * parts / n == part.
std::pair<size_t, size_t> Receivers(size_t n, uint32_t parts, uint32_t part) {
  return {(part * n + parts - 1) / parts, ((part + 1) * n + parts - 1) / parts};
}

// What a sender of `sent` bytes of a layout, which itself receives `own` bytes of it, sends
// in a part whose receivers take `part_received` of the layout's `total_received` bytes:
// its bytes spread over the other ranks' receipts in proportion (a rank sends nothing to
// itself on the wire), so that two ranks swapping pieces count nothing in the part of their
// own receipt. The plan keeps no bytes per pair of ranks; this is exact when a sender's
// bytes follow the receipts.
int64_t SentInPart(int64_t sent, int64_t own, int64_t part_received, int64_t total_received,
                   bool receives_in_part) {
  const int64_t others = total_received - own;
  const int64_t in_part = part_received - (receives_in_part ? own : 0);
  if (others <= 0 || in_part <= 0) return 0;
  return static_cast<int64_t>(std::ceil(static_cast<long double>(sent) * in_part / others));
}

// One rank's bytes on one side (sent or received) in each exchange group so far, in a
// tree of minima over the groups, so that the first group with room for an item is found in
// a walk up and down the tree rather than a look at every group.
class GroupLoads {
 public:
  // The first group >= `from` whose bytes are at most `most` (>= 0; the groups past the
  // last with bytes hold none).
  size_t FirstWithRoom(size_t from, int64_t most) const {
    const size_t leaves = tree_.size() / 2;
    if (from >= leaves) return from;
    size_t i = from + leaves;
    if (tree_[i] <= most) return from;
    // Up to the first subtree right of `from` that holds such a group, then down into it.
    while (true) {
      if (i == 1) return leaves;  // none among the leaves: the next group holds nothing
      if ((i & 1) == 0 && tree_[i + 1] <= most) {
        ++i;
        break;
      }
      i >>= 1;
    }
    while (i < leaves) {
      i <<= 1;
      if (tree_[i] > most) ++i;
    }
    return i - leaves;
  }

  void Add(size_t group, int64_t bytes) {
    size_t leaves = tree_.size() / 2;
    if (group >= leaves) {
      size_t grown = std::max<size_t>(leaves * 2, 64);
      while (grown <= group) grown *= 2;
      std::vector<int64_t> tree(2 * grown, 0);
      std::copy(tree_.begin() + static_cast<std::ptrdiff_t>(leaves), tree_.end(),
                tree.begin() + static_cast<std::ptrdiff_t>(grown));
      for (size_t i = grown - 1; i > 0; --i) tree[i] = std::min(tree[2 * i], tree[2 * i + 1]);
      tree_ = std::move(tree);
      leaves = grown;
    }
    size_t i = group + leaves;
    tree_[i] += bytes;
    // Bytes only grow: a minimum above that does not change leaves the ones above it alone.
    for (i >>= 1; i > 0; i >>= 1) {
      const int64_t least = std::min(tree_[2 * i], tree_[2 * i + 1]);
      if (tree_[i] == least) break;
      tree_[i] = least;
    }
  }

 private:
  // tree_[leaves + g]: group g's bytes; tree_[i]: the least of tree_[2i] and tree_[2i + 1].
  std::vector<int64_t> tree_;
};

}  // namespace

uint32_t PartOf(const ExchangeOrder& order, const TransferTensorPlan& tensor, size_t index,
                int64_t destination_rank) {
  const uint32_t parts = index < order.part_counts.size() ? order.part_counts[index] : 1;
  if (parts == 1) return 0;
  const PerRank& received = tensor.layout->received;
  const auto it = std::lower_bound(received.begin(), received.end(),
                                   std::make_pair(destination_rank, int64_t{0}));
  if (it == received.end() || it->first != destination_rank) return 0;
  return static_cast<uint32_t>(static_cast<size_t>(it - received.begin()) * parts /
                               received.size());
}

ExchangeOrder OrderExchanges(const TransferPlan& plan, int64_t bucket_bytes) {
  ExchangeOrder order;
  order.part_counts.assign(plan.tensors.size(), 1);
  struct Item {
    size_t tensor;
    uint32_t part;
    int64_t received = 0;  // by the part's receivers
  };
  std::vector<int64_t> total_received(plan.tensors.size(), 0);  // of tensors cut in parts
  // Rank `rank`'s bytes sent in `item`, of `sent` in its tensor.
  const auto sent_in = [&](const Item& item, int64_t rank, int64_t sent) {
    const TransferLayoutPlan& layout = *plan.tensors[item.tensor].layout;
    const uint32_t parts = order.part_counts[item.tensor];
    if (parts == 1) return sent;
    const auto [first, last] = Receivers(layout.received.size(), parts, item.part);
    const auto it = std::lower_bound(layout.received.begin(), layout.received.end(),
                                     std::make_pair(rank, int64_t{0}));
    const auto i = static_cast<size_t>(it - layout.received.begin());
    const bool receives = it != layout.received.end() && it->first == rank;
    return SentInPart(sent, receives ? it->second : 0, item.received, total_received[item.tensor],
                      receives && i >= first && i < last);
  };
  // Calls visit(sends, rank, bytes) for every rank the item gives bytes.
  const auto each_rank = [&](const Item& item, auto&& visit) {
    const TransferLayoutPlan& layout = *plan.tensors[item.tensor].layout;
    const uint32_t parts = order.part_counts[item.tensor];
    for (const auto& [rank, bytes] : layout.sent) {
      const int64_t mine = sent_in(item, rank, bytes);
      if (mine > 0) visit(true, rank, mine);
    }
    const auto [first, last] = Receivers(layout.received.size(), parts, item.part);
    for (size_t i = first; i < last; ++i) {
      visit(false, layout.received[i].first, layout.received[i].second);
    }
  };
  std::vector<Item> items;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const TransferLayoutPlan& layout = *plan.tensors[t].layout;
    if (layout.collective != Collective::kNone) continue;
    const uint32_t parts = PartCount(layout, bucket_bytes);
    order.part_counts[t] = parts;
    if (parts == 1) {
      items.push_back({t, 0});
      continue;
    }
    for (const auto& [rank, bytes] : layout.received) total_received[t] += bytes;
    for (uint32_t p = 0; p < parts; ++p) {
      const auto [first, last] = Receivers(layout.received.size(), parts, p);
      int64_t part_received = 0;
      for (size_t i = first; i < last; ++i) part_received += layout.received[i].second;
      items.push_back({t, p, part_received});
    }
  }
  // Each item, in plan order, goes to the first group where each of its ranks has room (a
  // rank with bytes there takes at most the bucket with the item's, else nothing but the
  // item): the groups that filling each group in turn with the items left that fit makes,
  // without a pass over every item left per group (which a small bucket made quadratic).
  std::vector<GroupLoads> sent(0), received(0);  // by rank, grown as ranks appear
  const auto loads = [&](bool sends, int64_t rank) -> GroupLoads& {
    std::vector<GroupLoads>& side = sends ? sent : received;
    if (static_cast<size_t>(rank) >= side.size()) side.resize(static_cast<size_t>(rank) + 1);
    return side[static_cast<size_t>(rank)];
  };
  std::vector<std::vector<std::pair<size_t, uint32_t>>> groups;
  struct Visit {
    bool sends;
    int64_t rank;
    int64_t bytes;
  };
  std::vector<Visit> visits;  // the item's ranks and bytes, each side apart
  for (const Item& item : items) {
    visits.clear();
    each_rank(item, [&](bool sends, int64_t rank, int64_t bytes) {
      visits.push_back({sends, rank, bytes});
    });
    size_t g = 0;
    for (bool moved = true; moved;) {
      moved = false;
      for (const Visit& v : visits) {
        const size_t room =
            loads(v.sends, v.rank).FirstWithRoom(g, std::max<int64_t>(0, bucket_bytes - v.bytes));
        if (room > g) {
          g = room;
          moved = true;
        }
      }
    }
    for (const Visit& v : visits) loads(v.sends, v.rank).Add(g, v.bytes);
    if (g >= groups.size()) groups.resize(g + 1);
    groups[g].emplace_back(item.tensor, item.part);
  }
  for (const auto& group : groups) {
    order.begin.push_back(order.tensors.size());
    for (const auto& [tensor, part] : group) {
      order.tensors.push_back(tensor);
      order.parts.push_back(part);
    }
  }
  return order;
}

}  // namespace sdrt::internal
