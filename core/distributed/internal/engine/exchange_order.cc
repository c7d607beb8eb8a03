#include "sdrt/core/distributed/internal/engine/exchange_order.h"

#include <algorithm>
#include <cmath>
#include <utility>

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
  // Each rank's bytes sent and received in the open group (indexed by rank, grown as
  // ranks appear), and the ranks to reset when it closes.
  std::vector<int64_t> sent, received;
  std::vector<int64_t> touched;
  const auto at = [](std::vector<int64_t>& side, int64_t rank) -> int64_t& {
    if (static_cast<size_t>(rank) >= side.size()) side.resize(static_cast<size_t>(rank) + 1, 0);
    return side[static_cast<size_t>(rank)];
  };
  // Whether a rank with `held` bytes on one side of the group passes the bucket with
  // `bytes` more: one item alone may give a rank more than a bucket (that rank's exchanges
  // of the group are then cut by its own bytes), nothing else may.
  const auto passes = [bucket_bytes](int64_t held, int64_t bytes) {
    return held > 0 && held + bytes > bucket_bytes;
  };
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
  // Calls visit(sends, rank, bytes) for every rank the item gives bytes, until it returns
  // false; false then.
  const auto each_rank = [&](const Item& item, auto&& visit) {
    const TransferLayoutPlan& layout = *plan.tensors[item.tensor].layout;
    const uint32_t parts = order.part_counts[item.tensor];
    for (const auto& [rank, bytes] : layout.sent) {
      const int64_t mine = sent_in(item, rank, bytes);
      if (mine > 0 && !visit(true, rank, mine)) return false;
    }
    const auto [first, last] = Receivers(layout.received.size(), parts, item.part);
    for (size_t i = first; i < last; ++i) {
      if (!visit(false, layout.received[i].first, layout.received[i].second)) return false;
    }
    return true;
  };
  // The rank and side that last kept an item out of the group, tried first: it stays full
  // while the group fills, and the items after one it blocked mostly involve it too.
  int64_t blocker = -1;
  bool blocker_sends = true;
  const auto blocked = [&](const Item& item) {
    if (blocker < 0) return false;
    const TransferLayoutPlan& layout = *plan.tensors[item.tensor].layout;
    const PerRank& list = blocker_sends ? layout.sent : layout.received;
    const auto it = std::lower_bound(list.begin(), list.end(), std::make_pair(blocker, int64_t{0}));
    if (it == list.end() || it->first != blocker) return false;
    const uint32_t parts = order.part_counts[item.tensor];
    if (blocker_sends) return passes(at(sent, blocker), sent_in(item, blocker, it->second));
    const auto [first, last] = Receivers(list.size(), parts, item.part);
    const auto i = static_cast<size_t>(it - list.begin());
    return i >= first && i < last && passes(at(received, blocker), it->second);
  };
  const auto fits = [&](const Item& item) {
    if (blocked(item)) return false;
    return each_rank(item, [&](bool sends, int64_t rank, int64_t bytes) {
      if (!passes(at(sends ? sent : received, rank), bytes)) return true;
      blocker = rank;
      blocker_sends = sends;
      return false;
    });
  };
  std::vector<Item> pending;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const TransferLayoutPlan& layout = *plan.tensors[t].layout;
    if (layout.collective != Collective::kNone) continue;
    const uint32_t parts = PartCount(layout, bucket_bytes);
    order.part_counts[t] = parts;
    if (parts == 1) {
      pending.push_back({t, 0});
      continue;
    }
    for (const auto& [rank, bytes] : layout.received) total_received[t] += bytes;
    for (uint32_t p = 0; p < parts; ++p) {
      const auto [first, last] = Receivers(layout.received.size(), parts, p);
      int64_t part_received = 0;
      for (size_t i = first; i < last; ++i) part_received += layout.received[i].second;
      pending.push_back({t, p, part_received});
    }
  }
  std::vector<Item> left;
  while (!pending.empty()) {
    order.begin.push_back(order.tensors.size());
    left.clear();
    for (const Item& item : pending) {
      if (!fits(item)) {
        left.push_back(item);
        continue;
      }
      order.tensors.push_back(item.tensor);
      order.parts.push_back(item.part);
      each_rank(item, [&](bool sends, int64_t rank, int64_t bytes) {
        at(sends ? sent : received, rank) += bytes;
        touched.push_back(rank);
        return true;
      });
    }
    for (const int64_t rank : touched) {
      at(sent, rank) = 0;
      at(received, rank) = 0;
    }
    touched.clear();
    blocker = -1;
    pending.swap(left);
  }
  return order;
}

}  // namespace sdrt::internal
