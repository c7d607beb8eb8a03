#include "sdrt/core/distributed/internal/engine/sync_cost.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <queue>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/threads.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// One wire message (a unit of the schedules): from `sender`'s exchange `sender_exchange`
// to `receiver`'s exchange `receiver_exchange` (indices into the ranks' own exchanges).
// Its ids run in (sender, receiver, n-th of the pair) order, which breaks ties in the run.
struct WireMessage {
  int32_t sender = 0, receiver = 0;
  uint32_t sender_exchange = 0, receiver_exchange = 0;
  int64_t bytes = 0;
};

// One rank's exchange: its copies and its messages (messages [first, first + count) of
// the world's lists).
struct RankExchange {
  double pack_seconds = 0, unpack_seconds = 0;
  bool prefetched = false;  // packed while the exchange before it moves (program.h)
  double packed_at = 0;     // when, if so, its packing ends
  double posted = -1;       // when its rank posted its messages; -1: not yet
  uint64_t first = 0;
  uint32_t count = 0;
  uint32_t pending = 0;
  double last_arrival = 0;
};

struct RankState {
  double start_seconds = 0;  // its chunks to itself before its first exchange
  std::vector<RankExchange> exchanges;
  size_t current = 0;
};

// A rank's send, and its receive, of one wire message. The n-th send of a (sender,
// receiver) pair is the n-th receive of that pair: both sides cut the pair's units alike,
// in the exchange order.
struct RankSend {
  int32_t receiver;
  uint32_t exchange;
  int64_t bytes;
};
struct RankReceive {
  uint32_t exchange;
  uint32_t low_bytes;  // the bytes' low 32 bits, to check the pairing
};

// What one rank's schedule gives the model: its sends by receiver, its receives by sender
// (from_first[s] .. from_first[s + 1]), each pair's in the order of its exchanges.
struct ScheduleFigures {
  absl::Status status;
  std::vector<RankSend> sends;
  std::vector<RankReceive> receives;
  std::vector<uint32_t> from_first;
  int64_t exchanges = 0;
};

// The most threads scheduling the ranks at once.
constexpr unsigned kMaxPredictThreads = 32;

// `items` grouped by their `key` (in [0, keys)), stably: the order within a key kept;
// and the first index of each key's group (keys + 1 entries) when `first` is not null.
template <typename T>
void GroupByKey(std::vector<T>& items, const std::vector<int32_t>& key, int64_t keys,
                std::vector<uint32_t>* first) {
  std::vector<uint32_t> at(static_cast<size_t>(keys) + 1);
  for (const int32_t k : key) ++at[static_cast<size_t>(k) + 1];
  for (size_t k = 1; k < at.size(); ++k) at[k] += at[k - 1];
  if (first != nullptr) *first = at;
  std::vector<T> grouped(items.size());
  for (size_t i = 0; i < items.size(); ++i) grouped[at[static_cast<size_t>(key[i])]++] = items[i];
  items = std::move(grouped);
}

// Rank r's schedule as `rank`'s copies and exchanges and `out`'s sends and receives.
absl::Status ReadSchedule(const TransferPlan& plan, int64_t r,
                          const TransferScheduleOptions& options, const ClusterLinks& links,
                          RankState& rank, ScheduleFigures& out) {
  SDRT_ASSIGN_OR_RETURN(const TransferSchedule s, ScheduleTransfer(plan, r, options));
  int64_t local = 0;
  for (size_t u = 0; u < s.local_units; ++u) local += s.units[u].bytes;
  rank.start_seconds = static_cast<double>(local) / links.copy;
  // A unit of one large dense box goes on the wire from its local on the CPU (DirectRange).
  const auto direct = [&](const TransferSchedule::Unit& unit, bool to_local) {
    const TransferSchedule::Step& step = s.steps[unit.first];
    return links.host && unit.count == 1 &&
           GoesDirect(plan.tensors[step.tensor], *step.chunk, to_local);
  };
  std::vector<int32_t> senders;  // of out.receives, in the order received
  const int64_t sending = SendingExchanges(s);
  for (size_t x = 0; x < s.exchanges(); ++x) {
    int64_t packed = 0, unpacked = 0;
    const auto exchange = static_cast<uint32_t>(rank.exchanges.size());
    for (size_t u = s.begin[x]; u < s.begin[x + 1]; ++u) {
      const TransferSchedule::Unit& unit = s.units[u];
      if (unit.source_rank == r && unit.destination_rank == r) {
        packed += unit.bytes;  // through the send bucket, or local to local
      } else if (unit.source_rank == r) {
        packed += direct(unit, /*to_local=*/false) ? 0 : unit.bytes;
        out.sends.push_back({static_cast<int32_t>(unit.destination_rank), exchange, unit.bytes});
      } else {
        unpacked += direct(unit, /*to_local=*/true) ? 0 : unit.bytes;
        out.receives.push_back({exchange, static_cast<uint32_t>(unit.bytes)});
        senders.push_back(static_cast<int32_t>(unit.source_rank));
      }
    }
    RankExchange& made = rank.exchanges.emplace_back();
    made.pack_seconds = static_cast<double>(packed) / links.copy;
    made.unpack_seconds = static_cast<double>(unpacked) / links.copy;
    made.prefetched =
        PackedAhead(static_cast<int64_t>(x), static_cast<int64_t>(s.direct_exchanges), sending);
  }
  if (out.receives.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", r, " receives more than 2^32 messages: not in the sync model"));
  }
  std::vector<int32_t> receivers(out.sends.size());
  for (size_t i = 0; i < receivers.size(); ++i) receivers[i] = out.sends[i].receiver;
  GroupByKey(out.sends, receivers, plan.world_size, nullptr);
  GroupByKey(out.receives, senders, plan.world_size, &out.from_first);
  out.exchanges = static_cast<int64_t>(s.exchanges());
  return absl::OkStatus();
}

absl::Status CheckPlan(const TransferPlan& plan, const ClusterLinks& links) {
  SDRT_RETURN_IF_ERROR(CheckClusterLinks(links));
  if (plan.rank != -1) {
    return absl::InvalidArgumentError("a sync is predicted from a plan of every rank");
  }
  if (links.nodes * links.gpus_per_node < plan.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("a cluster of ", links.nodes, " x ",
                                                   links.gpus_per_node, " GPUs for a world of ",
                                                   plan.world_size, " ranks"));
  }
  for (const TransferTensorPlan& t : plan.tensors) {
    if (t.layout->collective != Collective::kNone) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", t.name, "' moves by a collective: not in the sync model"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckClusterLinks(const ClusterLinks& links) {
  if (links.nodes < 1 || links.gpus_per_node < 1 ||
      links.nodes > kMaxMeshRanks / links.gpus_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cluster of ", links.nodes, " x ", links.gpus_per_node, " GPUs"));
  }
  if (!(links.nvlink > 0 && links.nic > 0 && links.copy > 0 && links.latency >= 0)) {
    return absl::InvalidArgumentError("link bandwidths must be > 0 and the latency >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<SyncPrediction> PredictSync(const TransferPlan& plan, const ClusterLinks& links,
                                           int64_t bucket_bytes) {
  SDRT_RETURN_IF_ERROR(CheckPlan(plan, links));
  const int64_t world = plan.world_size;
  SyncPrediction out;
  std::vector<RankState> ranks(static_cast<size_t>(world));
  TransferScheduleOptions options;
  options.bucket_bytes = bucket_bytes;
  options.chunk_alignment = kDeviceChunkAlignment;
  const ExchangeOrder order = OrderExchanges(plan, bucket_bytes);
  options.exchange_order = &order;
  // Every rank's schedule, on as many threads as the machine has (each rank's into its
  // own figures).
  const auto threads = static_cast<int64_t>(
      std::clamp<unsigned>(std::thread::hardware_concurrency(), 1, kMaxPredictThreads));
  std::vector<ScheduleFigures> figures(static_cast<size_t>(world));
  std::atomic<int64_t> next_rank{0};
  const auto work = [&] {
    for (int64_t r = next_rank++; r < world; r = next_rank++) {
      ScheduleFigures& f = figures[static_cast<size_t>(r)];
      f.status = OnWorkerThread(
          [&] { return ReadSchedule(plan, r, options, links, ranks[static_cast<size_t>(r)], f); });
    }
  };
  std::vector<std::thread> pool;  // those that start; this thread works too
  StartThreads(static_cast<size_t>(std::min(threads, world) - 1), [&](size_t) { work(); }, pool);
  work();
  for (std::thread& t : pool) t.join();
  size_t sent = 0, received = 0;
  for (size_t r = 0; r < figures.size(); ++r) {
    const ScheduleFigures& f = figures[r];
    if (!f.status.ok()) {
      return OutOfMemorySaid(f.status, absl::StrCat("scheduling rank ", r, " for the sync model"));
    }
    out.max_exchanges = std::max(out.max_exchanges, f.exchanges);
    sent += f.sends.size();
    received += f.receives.size();
  }
  if (sent != received || sent > UINT32_MAX) {
    return absl::InternalError(
        absl::StrCat("the schedules send ", sent, " messages and receive ", received));
  }
  // The messages, each send paired with its receive (the n-th of its pair on both sides),
  // a sender's sends freed once paired.
  std::vector<WireMessage> messages;
  messages.reserve(sent);
  std::vector<int64_t> nic_sent(world), nic_received(world), nvl_sent(world), nvl_received(world);
  const auto node = [&](int64_t r) { return r / links.gpus_per_node; };
  for (int64_t from = 0; from < world; ++from) {
    std::vector<RankSend>& sends = figures[static_cast<size_t>(from)].sends;
    uint32_t nth = 0;
    for (size_t i = 0; i < sends.size(); ++i) {
      const RankSend& m = sends[i];
      nth = i > 0 && sends[i - 1].receiver == m.receiver ? nth + 1 : 0;
      const ScheduleFigures& to = figures[static_cast<size_t>(m.receiver)];
      const uint32_t at = to.from_first[static_cast<size_t>(from)] + nth;
      if (at >= to.from_first[static_cast<size_t>(from) + 1] ||
          to.receives[at].low_bytes != static_cast<uint32_t>(m.bytes)) {
        return absl::InternalError(absl::StrCat("message ", nth, " from rank ", from,
                                                " to rank ", m.receiver, " has no receive"));
      }
      messages.push_back({static_cast<int32_t>(from), m.receiver, m.exchange,
                          to.receives[at].exchange, m.bytes});
      const bool nic = node(from) != node(m.receiver);
      (nic ? nic_sent : nvl_sent)[from] += m.bytes;
      (nic ? nic_received : nvl_received)[m.receiver] += m.bytes;
    }
    sends = {};
  }
  figures = {};
  out.messages = static_cast<int64_t>(messages.size());
  // Each exchange's messages, both sides', as ranges of one list.
  const auto sides = [&](const WireMessage& m) {
    return std::array<RankExchange*, 2>{
        &ranks[static_cast<size_t>(m.sender)].exchanges[m.sender_exchange],
        &ranks[static_cast<size_t>(m.receiver)].exchanges[m.receiver_exchange]};
  };
  for (const WireMessage& m : messages) {
    for (RankExchange* x : sides(m)) ++x->count;
  }
  uint64_t listed = 0;
  for (RankState& rank : ranks) {
    for (RankExchange& x : rank.exchanges) {
      x.first = listed;
      listed += x.count;
      x.count = 0;
    }
  }
  std::vector<uint32_t> lists(listed);
  for (size_t id = 0; id < messages.size(); ++id) {
    for (RankExchange* x : sides(messages[id])) {
      lists[x->first + x->count++] = static_cast<uint32_t>(id);
    }
  }
  for (int64_t r = 0; r < world; ++r) {
    out.max_nic_bytes = std::max({out.max_nic_bytes, nic_sent[r], nic_received[r]});
    out.max_nvlink_bytes = std::max({out.max_nvlink_bytes, nvl_sent[r], nvl_received[r]});
  }
  out.busiest_link_seconds = std::max(static_cast<double>(out.max_nic_bytes) / links.nic,
                                      static_cast<double>(out.max_nvlink_bytes) / links.nvlink);

  // The run: messages leave in the order they become ready.
  using Ready = std::pair<double, uint32_t>;
  std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>> ready;
  std::vector<double> nic_send_free(world), nic_receive_free(world), nvl_send_free(world),
      nvl_receive_free(world);
  // On the CPU (links.host): when each rank's thread is done with the copies it started.
  std::vector<double> cpu_free(links.host ? static_cast<size_t>(world) : 0);
  // Rank r reaches its next exchange (or its end) at time t: it packs the exchange unless
  // that was done ahead, posts its messages and packs the next one ahead if it may; the
  // exchange ends when its messages have arrived and that packing is done, then unpacks.
  const auto ends = [](const RankState& rank, double arrived) {
    const size_t next = rank.current + 1;
    const bool ahead = next < rank.exchanges.size() && rank.exchanges[next].prefetched;
    return std::max(arrived, ahead ? rank.exchanges[next].packed_at : 0.0);
  };
  const auto reach = [&](int64_t r, double t) {
    RankState& rank = ranks[static_cast<size_t>(r)];
    while (rank.current < rank.exchanges.size()) {
      RankExchange& x = rank.exchanges[rank.current];
      const double posted = x.prefetched ? t : t + x.pack_seconds;
      const size_t next = rank.current + 1;
      if (next < rank.exchanges.size() && rank.exchanges[next].prefetched) {
        rank.exchanges[next].packed_at = posted + rank.exchanges[next].pack_seconds;
        if (links.host) cpu_free[static_cast<size_t>(r)] = rank.exchanges[next].packed_at;
      }
      if (x.count == 0) {
        t = ends(rank, posted) + x.unpack_seconds;
        ++rank.current;
        continue;
      }
      x.posted = posted;
      x.pending = x.count;
      // A message is ready once both of its exchanges are posted.
      for (uint64_t k = x.first; k < x.first + x.count; ++k) {
        const WireMessage& m = messages[lists[k]];
        const RankExchange& other =
            m.sender == r ? ranks[static_cast<size_t>(m.receiver)].exchanges[m.receiver_exchange]
                          : ranks[static_cast<size_t>(m.sender)].exchanges[m.sender_exchange];
        if (other.posted >= 0) ready.push({std::max(posted, other.posted), lists[k]});
      }
      return;
    }
    out.seconds = std::max(out.seconds, t);
  };
  for (int64_t r = 0; r < world; ++r) reach(r, ranks[static_cast<size_t>(r)].start_seconds);
  // A message ends one side's wait: the exchange it completes unpacks, and its rank moves
  // on.
  const auto arrive = [&](int64_t r, uint32_t exchange, double t) {
    RankState& rank = ranks[static_cast<size_t>(r)];
    RankExchange& x = rank.exchanges[exchange];
    x.last_arrival = std::max(x.last_arrival, t);
    if (--x.pending > 0) return;
    const double end = ends(rank, x.last_arrival) + x.unpack_seconds;
    ++rank.current;
    reach(r, end);
  };
  while (!ready.empty()) {
    const auto [at, id] = ready.top();
    ready.pop();
    const WireMessage& m = messages[id];
    const bool nic = node(m.sender) != node(m.receiver);
    double& send_free = (nic ? nic_send_free : nvl_send_free)[m.sender];
    double& receive_free = (nic ? nic_receive_free : nvl_receive_free)[m.receiver];
    const double busy = static_cast<double>(m.bytes) / (nic ? links.nic : links.nvlink);
    double arrival = 0;
    if (links.host) {
      // On the CPU the receiver's own thread copies the message in (after the packing it
      // started ahead), so the bytes take both queues and its processor at once.
      double& cpu = cpu_free[static_cast<size_t>(m.receiver)];
      const double start = std::max({at, send_free, receive_free, cpu});
      send_free = receive_free = cpu = start + busy;
      arrival = start + busy + links.latency;
    } else {
      send_free = std::max(at, send_free) + busy;
      receive_free = std::max(at, receive_free) + busy;
      arrival = std::max(send_free, receive_free) + links.latency;
    }
    arrive(m.sender, m.sender_exchange, arrival);
    arrive(m.receiver, m.receiver_exchange, arrival);
  }
  for (const RankState& rank : ranks) {
    if (rank.current < rank.exchanges.size()) {
      return absl::InternalError("the schedules wait on each other: a message is never sent");
    }
  }
  return out;
}

}  // namespace sdrt::internal
