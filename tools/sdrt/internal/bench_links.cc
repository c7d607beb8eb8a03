#include "sdrt/tools/sdrt/internal/bench_links.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "sdrt/core/distributed/internal/node.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// Past the caches: a sync copies between buffers of the model's size, not warm lines.
constexpr int64_t kSwapBytes = int64_t{64} << 20;
constexpr int kLatencySwaps = 200;  // small exchanges per timed run
// The small swap: a message the size of the smallest piece that goes on the wire from its
// tensor (kDirectRangeBytes), so that the latency is that of a sync's messages (MPI's
// rendezvous of large messages, not the eager send of a few bytes).
constexpr int64_t kSmallSwapBytes = int64_t{64} << 10;

// Who this rank swaps with, from every rank's node.
struct Partners {
  int pair = -1;          // a rank of its node (-1: none, it idles)
  int nic = -1;           // a rank of another node (-1: none)
  bool any_pair = false;  // some node has two ranks or more
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;
};

Partners FindPartners(const std::vector<int>& node_of_rank, int rank) {
  Partners p;
  std::vector<std::vector<int>> ranks_of;
  for (int q = 0; q < static_cast<int>(node_of_rank.size()); ++q) {
    const size_t node = static_cast<size_t>(node_of_rank[q]);
    if (node >= ranks_of.size()) ranks_of.resize(node + 1);
    ranks_of[node].push_back(q);
  }
  p.nodes = static_cast<int64_t>(ranks_of.size());
  for (const std::vector<int>& ranks : ranks_of) {
    p.gpus_per_node = std::max(p.gpus_per_node, static_cast<int64_t>(ranks.size()));
    p.any_pair = p.any_pair || ranks.size() >= 2;
  }
  const size_t node = static_cast<size_t>(node_of_rank[rank]);
  const std::vector<int>& mine = ranks_of[node];
  const size_t at = static_cast<size_t>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
  if ((at ^ 1) < mine.size()) p.pair = mine[at ^ 1];
  const size_t other = node ^ 1;
  if (other < ranks_of.size() && at < ranks_of[other].size()) p.nic = ranks_of[other][at];
  return p;
}

// One exchange: `bytes` of `send` to `partner` and as many from it into `recv`; no message
// without a partner (-1).
absl::Status Swap(Communicator& world, int partner, const uint8_t* send, uint8_t* recv,
                  int64_t bytes) {
  if (partner < 0) return world.Exchange({}, {});
  const Communicator::SendMessage out{partner, send, bytes};
  const Communicator::ReceiveMessage in{partner, recv, bytes};
  return world.Exchange({&out, 1}, {&in, 1});
}

// Bytes of `got` that differ from rank `from`'s sent bytes (none without a partner).
int64_t WrongFrom(const uint8_t* got, int from, int64_t bytes) {
  if (from < 0) return 0;
  int64_t wrong = 0;
  for (int64_t j = 0; j < bytes; ++j) wrong += got[j] != BenchByte(from, j) ? 1 : 0;
  return wrong;
}

// Internal naming `what` unless `value` lies in [low, high].
absl::Status CheckFigure(const char* what, double value, double low, double high,
                         const char* unit) {
  if (std::isfinite(value) && value >= low && value <= high) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat(
      "links: the %s measured, %g %s, is outside what sdrt simulate takes (%g to %g %s)", what,
      value, unit, low, high, unit));
}

uint8_t* Data(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

}  // namespace

uint8_t BenchByte(int rank, int64_t j) {
  return static_cast<uint8_t>(j * 131 + (j >> 8) * 7 + int64_t{rank} * 61 + 1);
}

absl::StatusOr<BenchRow> MeasureLinks(Communicator& world, const BenchSettings& settings) {
  if (world.size() < 2) {
    return absl::InvalidArgumentError("links needs 2 ranks or more: each swaps with a partner");
  }
  const int rank = world.rank();
  absl::StatusOr<std::vector<int>> node_of_rank = internal::NodeOfRank(world, {});
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world, node_of_rank.status()));
  const Partners p = FindPartners(*node_of_rank, rank);
  // Without two ranks on any node the pairs are across nodes, and the pair's figure is
  // the nic's; with both, the nic is measured apart.
  const int partner = p.any_pair ? p.pair : p.nic;
  const bool nic_apart = p.any_pair && p.nodes > 1;
  const int64_t bytes = kSwapBytes;

  absl::StatusOr<Tensor> send = Tensor::Empty({bytes}, DType::kUInt8);
  absl::StatusOr<Tensor> recv = Tensor::Zeros({bytes}, DType::kUInt8);
  absl::StatusOr<Tensor> copied = Tensor::Zeros({bytes}, DType::kUInt8);
  absl::StatusOr<Tensor> nic_recv = Tensor::Zeros({nic_apart ? bytes : 0}, DType::kUInt8);
  absl::Status ready = send.status();
  for (const absl::Status& s : {recv.status(), copied.status(), nic_recv.status()}) {
    ready.Update(s);
  }
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world, ready));
  for (int64_t j = 0; j < bytes; ++j) Data(*send)[j] = BenchByte(rank, j);

  BenchRow row;
  row.op = "links";
  row.size = bytes;
  row.count = 1;
  row.type = "uint8";
  row.busbw_bytes = bytes;
  row.stats.exchanges = 1;
  row.stats.collectives = 1;
  FreshBuffer fresh;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] { return Swap(world, partner, Data(*send), Data(*recv), bytes); };
  calls.flat = [&] { std::memcpy(Data(*copied), Data(*send), static_cast<size_t>(bytes)); };
  calls.fresh = [&] {
    absl::Status status;
    std::memcpy(FreshOrWarm(bytes, Data(*copied), &fresh, &status), Data(*send),
                static_cast<size_t>(bytes));
    return status;
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(MeasureRow(world, calls, settings.warmup, settings.iterations, &row.times));
  SDRT_ASSIGN_OR_RETURN(const std::vector<double> latency_runs,
                        MeasureRuns(
                            world,
                            [&]() -> absl::Status {
                              // Each swap from and into bytes the ones before did not touch, as a
                              // sync's messages are: the same 64 KiB again would stay in the
                              // caches.
                              for (int k = 0; k < kLatencySwaps; ++k) {
                                const int64_t at = k * kSmallSwapBytes % bytes;
                                SDRT_RETURN_IF_ERROR(Swap(world, partner, Data(*send) + at,
                                                          Data(*recv) + at, kSmallSwapBytes));
                              }
                              return absl::OkStatus();
                            },
                            settings.warmup, settings.iterations));
  std::vector<double> nic_runs;
  if (nic_apart) {
    SDRT_ASSIGN_OR_RETURN(
        nic_runs,
        MeasureRuns(
            world, [&] { return Swap(world, p.nic, Data(*send), Data(*nic_recv), bytes); },
            settings.warmup, settings.iterations));
  }

  // The figures, from the medians (the same on every rank: each run is the slowest rank's).
  BenchLinks links;
  links.nodes = p.nodes;
  links.gpus_per_node = p.gpus_per_node;
  // A swap of b bytes takes latency + b / pair: the line through the small and the large
  // swap (a large one no slower than a small one: its bytes over its time, no latency).
  const double small = Summarize(latency_runs).median / kLatencySwaps;
  const double large = Summarize(row.times.sdrt).median;
  const double size = static_cast<double>(bytes);
  const double small_size = static_cast<double>(kSmallSwapBytes);
  links.pair = large > small ? (size - small_size) / (large - small) : size / large;
  links.latency = std::max(0.0, small - small_size / links.pair);
  links.nic = nic_apart ? size / (Summarize(nic_runs).median - links.latency) : links.pair;
  links.copy = size / Summarize(row.times.flat).median;
  SDRT_RETURN_IF_ERROR(CheckFigure("pair bandwidth", links.pair, 1e6, 1e15, "B/s"));
  SDRT_RETURN_IF_ERROR(CheckFigure("nic bandwidth", links.nic, 1e6, 1e15, "B/s"));
  SDRT_RETURN_IF_ERROR(CheckFigure("copy bandwidth", links.copy, 1e6, 1e15, "B/s"));
  SDRT_RETURN_IF_ERROR(CheckFigure("latency", links.latency, 0, 1, "s"));
  links.cluster = absl::StrFormat(
      "nodes=%d,gpus=%d,nvlink=%.4gGB/s,nic=%.4gGB/s,latency=%.4gus,copy=%.4gGB/s,"
      "device=cpu",
      links.nodes, links.gpus_per_node, links.pair / 1e9, links.nic / 1e9, links.latency * 1e6,
      links.copy / 1e9);
  row.links = links;

  int64_t wrong = WrongFrom(Data(*recv), partner, bytes);
  if (nic_apart) wrong += WrongFrom(Data(*nic_recv), p.nic, bytes);
  row.wrong = SumOverRanks(wrong);
  row.flat_wrong = SumOverRanks(WrongFrom(Data(*copied), rank, bytes));
  return row;
}

}  // namespace sdrt::cli
