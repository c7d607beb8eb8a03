// `mpiexec -n 8 reshard_bench --file F [--repeat K] [--bucket-mib M] [--json PATH]`: the
// peer-to-peer reshard (core/distributed/reshard_state_dict.h) of the Llama-shaped state
// dict of F (load_bench --make llama F: 291 tensors, 1.00 GB bf16) against, in the same
// run, (a) the funnel PyTorch's utilities allow: GatherStateDict to rank 0 (ranks_only {0},
// cpu_offload) then BroadcastStateDict into the destination layout, and (b) the floor: the
// busiest rank's bytes over the point-to-point bandwidth measured here (one 64 MiB
// Exchange between ranks 0 and 1 with the others idle); `--plan-only TENSORS RANKS` times the
// planner alone in one process (below). Rows:
//   fsdp8_tp4x2      fsdp over 8 ranks -> tp over 4 ranks, 2 replicas (mesh 2x4, [R, tp])
//   trainer4_engine4 fsdp on ranks 0-3 -> tp on ranks 4-7 (the funnel: gather over ranks
//                    0-3 to rank 0, rank 0 sends the full tensors to rank 4, which
//                    broadcasts over ranks 4-7: BroadcastStateDict wants every rank of its
//                    communicator to hold the destination layout)
// A time is the slowest rank's, the median of K repetitions (after one warm-up), each into
// fresh meta destinations (both ways allocate their results). Every rank checks its
// destination pieces against DistributeTensor of the full tensors (#wrong).
#include <mpi.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/bench/mpi_bench_util.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace {

using sdrt::DTensor;
using sdrt::Map;
using sdrt::Placement;
using sdrt::Tensor;
using sdrt::Value;
using sdrt::bench::Check;

using Mesh = std::shared_ptr<const sdrt::DeviceMesh>;

Mesh MeshOf(sdrt::IntVector shape, std::vector<int64_t> ranks) {
  return std::make_shared<const sdrt::DeviceMesh>(
      Check(sdrt::DeviceMesh::Create(shape, std::move(ranks)), "mesh"));
}

std::vector<int64_t> Ranks(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

struct Side {
  Mesh mesh;
  // Placements of tensor i on this side.
  std::vector<std::vector<Placement>> placements;
};

struct Row {
  std::string name;
  Side source, destination;
  // The funnel: GatherStateDict to rank 0, then BroadcastStateDict. kOneWorld: both over
  // the world (the layouts share its ranks). kRelay: the sides are disjoint, so the gather
  // runs over the source ranks, rank 0 sends each full tensor to the first destination
  // rank (one Exchange), which broadcasts over the destination ranks.
  enum class Funnel { kOneWorld, kRelay } funnel = Funnel::kOneWorld;
};

Map SourceDict(const Side& side, const std::vector<Tensor>& full,
               const sdrt::CheckpointSource& file, int rank) {
  Map m;
  if (!side.mesh->Coordinate(rank).has_value()) return m;
  for (size_t i = 0; i < full.size(); ++i) {
    m.Set(file.tensors()[i].name,
          Value(Check(sdrt::DistributeTensor(full[i], side.mesh, side.placements[i], rank),
                      "distribute")));
  }
  return m;
}

Map MetaDict(const Side& side, const sdrt::CheckpointSource& file, int rank) {
  Map m;
  if (!side.mesh->Coordinate(rank).has_value()) return m;
  for (size_t i = 0; i < file.tensors().size(); ++i) {
    const auto& t = file.tensors()[i];
    const sdrt::IntVector local =
        Check(sdrt::ComputeLocalShape(t.shape, *side.mesh, side.placements[i], rank), "shape");
    m.Set(t.name, Value(Check(DTensor::Make(Check(Tensor::Meta(local, t.dtype), "meta"), side.mesh,
                                            side.placements[i], t.shape),
                              "dtensor")));
  }
  return m;
}

// Destination pieces that differ from DistributeTensor's, on this rank.
int64_t Wrong(const Map& got, const Side& side, const std::vector<Tensor>& full,
              const sdrt::CheckpointSource& file, int rank) {
  if (!side.mesh->Coordinate(rank).has_value()) return 0;
  int64_t wrong = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    const Value* v = got.Find(file.tensors()[i].name);
    const DTensor want =
        Check(sdrt::DistributeTensor(full[i], side.mesh, side.placements[i], rank), "want");
    if (v == nullptr || v->kind() != sdrt::ValueKind::kDTensor ||
        v->as_dtensor().local().nbytes() != want.local().nbytes() ||
        (want.local().nbytes() > 0 &&
         std::memcmp(v->as_dtensor().local().data_ptr(), want.local().data_ptr(),
                     want.local().nbytes()) != 0)) {
      ++wrong;
    }
  }
  return wrong;
}

// Slowest rank's seconds of `run`, median of `repeat` after one warm-up; `prepare` runs
// untimed before each.
sdrt::bench::Spread Time(int repeat, const std::function<void()>& prepare,
                         const std::function<void()>& run) {
  std::vector<double> seconds;
  for (int it = 0; it <= repeat; ++it) {
    prepare();
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    run();
    const double s = sdrt::bench::Reduce(MPI_Wtime() - start, MPI_MAX);
    if (it > 0) seconds.push_back(s);
  }
  return sdrt::bench::Summarize(seconds);
}

}  // namespace

sdrt::GatherOptions GatherToRankZero(sdrt::Communicator& comm, int64_t bucket_mib) {
  sdrt::GatherOptions g;
  g.comm = &comm;
  g.ranks_only = {0};
  g.cpu_offload = true;
  g.bucket_bytes = bucket_mib << 20;
  return g;
}

// The funnel over the world: gather to rank 0, broadcast into the destination's metas.
double FunnelOneWorld(const Row& row, sdrt::Communicator& world, const Map& source,
                      const sdrt::CheckpointSource& file, int repeat, int64_t bucket_mib) {
  Map gathered, funneled;
  return Time(
             repeat, [&] { funneled = MetaDict(row.destination, file, world.rank()); },
             [&] {
               gathered = Check(sdrt::GatherStateDict(source, GatherToRankZero(world, bucket_mib)),
                                "gather");
               sdrt::BroadcastOptions b;
               b.comm = &world;
               b.bucket_bytes = bucket_mib << 20;
               Check(sdrt::BroadcastStateDict(gathered, funneled, b).status(), "broadcast");
             })
      .median;
}

// The funnel between disjoint sides: gather over the source ranks to rank 0, one Exchange
// of every full tensor from rank 0 to the first destination rank (into fresh tensors),
// broadcast over the destination ranks into their metas.
double FunnelRelay(const Row& row, sdrt::Communicator& world, const Map& source,
                   const std::vector<Tensor>& full, const sdrt::CheckpointSource& file, int repeat,
                   int64_t bucket_mib) {
  const int me = world.rank();
  const int relay = static_cast<int>(row.destination.mesh->ranks().front());
  const bool is_source = row.source.mesh->Coordinate(me).has_value();
  const bool is_destination = row.destination.mesh->Coordinate(me).has_value();
  const auto sources = Check(world.Split(is_source ? 0 : -1, me), "split sources");
  const auto destinations = Check(world.Split(is_destination ? 0 : -1, me), "split destinations");
  const auto hop = Check(world.Split(me == 0 || me == relay ? 0 : -1, me), "split hop");
  // The destination side as its own communicator numbers it.
  Side local = row.destination;
  local.mesh = MeshOf(row.destination.mesh->shape(), {});
  Map gathered, received, funneled;
  return Time(
             repeat,
             [&] {
               funneled = is_destination ? MetaDict(local, file, destinations->rank()) : Map();
             },
             [&] {
               if (is_source) {
                 gathered = Check(
                     sdrt::GatherStateDict(source, GatherToRankZero(*sources, bucket_mib)),
                     "gather");
               }
               if (hop != nullptr) {
                 std::vector<sdrt::Communicator::SendMessage> sends;
                 std::vector<sdrt::Communicator::ReceiveMessage> receives;
                 received = Map();
                 for (size_t i = 0; i < full.size(); ++i) {
                   const std::string& name = file.tensors()[i].name;
                   if (me == 0) {
                     const Tensor& t = gathered.Find(name)->as_tensor();
                     sends.push_back({1, t.data_ptr(), t.nbytes()});
                   } else {
                     Tensor t = Check(Tensor::Empty(full[i].shape(), full[i].dtype()), "empty");
                     receives.push_back({0, t.data_ptr(), t.nbytes()});
                     received.Set(name, Value(std::move(t)));
                   }
                 }
                 Check(hop->Exchange(sends, receives), "hop");
               }
               if (is_destination) {
                 sdrt::BroadcastOptions b;
                 b.comm = destinations.get();
                 b.bucket_bytes = bucket_mib << 20;
                 Check(sdrt::BroadcastStateDict(received, funneled, b).status(), "broadcast");
               }
             })
      .median;
}

// `reshard_bench --plan-only TENSORS RANKS [distinct]` (one process, no MPI): the time
// for rank 0 to plan fsdp(RANKS) -> tp(8) x RANKS/8 for TENSORS Llama-shaped descriptors
// (the shapes of one layer of the file's Llama / 4, repeated, as a model's layers repeat
// them), descriptors only; with `distinct`, every tensor gets a shape of its own (rows
// grow by one per tensor), the planner's worst case.
int PlanOnly(int64_t tensors, int64_t ranks, bool distinct) {
  struct Shape {
    sdrt::IntVector shape;
    const char* tp;
  };
  const Shape shapes[] = {{{1024, 1024}, "[R, S(0)]"}, {{256, 1024}, "[R, S(0)]"},
                          {{1024, 1024}, "[R, S(1)]"}, {{3584, 1024}, "[R, S(0)]"},
                          {{1024, 3584}, "[R, S(1)]"}, {{1024}, "[R, R]"}};
  const Mesh source = MeshOf({ranks}, {});
  const Mesh destination = MeshOf({ranks / 8, 8}, {});
  std::vector<sdrt::internal::TransferTensor> descriptors;
  for (int64_t i = 0; i < tensors; ++i) {
    const Shape& s = shapes[i % 6];
    sdrt::internal::TransferTensor t;
    t.name = absl::StrCat("t", i);
    t.dtype = sdrt::DType::kBFloat16;
    t.shape = s.shape;
    if (distinct) t.shape[0] += i;
    t.source.mesh = source;
    t.source.placements = {Placement::Shard(0)};
    t.destination.mesh = destination;
    t.destination.placements = Check(sdrt::ParsePlacements(s.tp), "placements");
    descriptors.push_back(std::move(t));
  }
  sdrt::internal::TransferPlanOptions options;
  options.rank = 0;
  const auto start = std::chrono::steady_clock::now();
  const sdrt::internal::TransferPlan plan =
      Check(sdrt::internal::PlanTransfer(descriptors, options), "PlanReshard");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  size_t messages = 0;
  for (const auto& t : plan.tensors) messages += t.messages().size();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "planned %lld %s tensors for rank 0, fsdp(%lld) -> tp(8) x %lld, in %.3f s (%.2f us per "
      "tensor); rank 0 keeps %zu of %lld messages; wire %lld bytes = optimum %lld; max sent "
      "%lld; peak RSS %.0f MiB\n",
      static_cast<long long>(tensors), distinct ? "distinct" : "repeating",
      static_cast<long long>(ranks), static_cast<long long>(ranks / 8), seconds,
      seconds / tensors * 1e6, messages, static_cast<long long>(plan.stats.messages),
      static_cast<long long>(plan.stats.wire_bytes),
      static_cast<long long>(plan.stats.optimum_bytes),
      static_cast<long long>(plan.stats.max_sent_bytes), usage.ru_maxrss / 1024.0);
  return 0;
}

int main(int argc, char** argv) {
  if ((argc == 4 || argc == 5) && std::string(argv[1]) == "--plan-only") {
    return PlanOnly(std::atoll(argv[2]), std::atoll(argv[3]),
                    argc == 5 && std::string(argv[4]) == "distinct");
  }
  std::string file_path, json_path;
  int repeat = 3;
  int64_t bucket_mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--file") file_path = argv[i + 1];
    if (a == "--json") json_path = argv[i + 1];
    if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--bucket-mib") bucket_mib = std::max(1, std::atoi(argv[i + 1]));
  }
  std::unique_ptr<sdrt::MpiCommunicator> world = Check(sdrt::MpiCommunicator::World(), "MPI world");
  const int me = world->rank();
  sdrt::bench::BenchRank() = me;
  if (world->size() != 8 || file_path.empty()) {
    if (me == 0) std::fprintf(stderr, "reshard_bench: mpiexec -n 8 reshard_bench --file F\n");
    return 2;
  }
  const sdrt::CheckpointSource file = Check(sdrt::CheckpointSource::Open(file_path), "open");
  std::vector<Tensor> full;
  int64_t total = 0;
  for (const auto& t : file.tensors()) {
    full.push_back(Check(file.Get(t.name), "get " + t.name));
    total += full.back().nbytes();
  }
  const sdrt::ShardingPlan fsdp = Check(sdrt::ShardingPlan::Builtin("fsdp"), "fsdp");
  const sdrt::ShardingPlan tp = Check(sdrt::ShardingPlan::Builtin("tp"), "tp");
  const Mesh tp_shape = MeshOf({4}, {});
  std::vector<Row> rows(2);
  rows[0].name = "fsdp8_tp4x2";
  rows[0].source.mesh = MeshOf({8}, {});
  rows[0].destination.mesh = MeshOf({2, 4}, {});
  rows[1].name = "trainer4_engine4";
  rows[1].source.mesh = MeshOf({4}, Ranks(0, 4));
  rows[1].destination.mesh = MeshOf({4}, Ranks(4, 8));
  rows[1].funnel = Row::Funnel::kRelay;
  for (const auto& t : file.tensors()) {
    const std::vector<Placement> p8 =
        Check(fsdp.PlacementsFor(t.name, t.shape, *rows[0].source.mesh), "fsdp");
    const std::vector<Placement> p4 = Check(tp.PlacementsFor(t.name, t.shape, *tp_shape), "tp");
    rows[0].source.placements.push_back(p8);
    rows[0].destination.placements.push_back({Placement::Replicate(), p4[0]});
    rows[1].source.placements.push_back(
        Check(fsdp.PlacementsFor(t.name, t.shape, *tp_shape), "fsdp4"));
    rows[1].destination.placements.push_back(p4);
  }

  // Point-to-point bandwidth: 64 MiB from rank 0 to rank 1 and back, the others idle.
  const int64_t probe = int64_t{64} << 20;
  std::vector<uint8_t> out(probe, 1), in(probe, 0);
  const auto exchange = [&] {
    std::vector<sdrt::Communicator::SendMessage> sends;
    std::vector<sdrt::Communicator::ReceiveMessage> receives;
    if (me == 0) sends.push_back({1, out.data(), probe});
    if (me == 1) receives.push_back({0, in.data(), probe});
    Check(world->Exchange(sends, receives), "probe");
  };
  const double p2p_seconds = Time(
                                 repeat, [] {}, exchange)
                                 .median;
  const double p2p_bw = probe / p2p_seconds;

  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (me == 0) {
    std::printf("# %s: %zu tensors, %lld bytes; 8 ranks; point-to-point %.2f GB/s (64 MiB)\n",
                file_path.c_str(), full.size(), static_cast<long long>(total), p2p_bw / 1e9);
    std::printf("%-17s %9s %9s %8s %10s %10s %8s %9s %9s %6s %7s %6s\n", "row", "plan ms",
                "reshard", "[min..max]", "funnel ms", "floor ms", "r/funnel", "r/floor", "wire/opt",
                "rounds", "buf MiB", "#wrong");
  }
  for (const Row& row : rows) {
    sdrt::ReshardOptions options;
    options.comm = world.get();
    options.bucket_bytes = bucket_mib << 20;
    const Map source = SourceDict(row.source, full, file, me);
    Map destination;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    const sdrt::ReshardPlan plan =
        Check(sdrt::PlanReshard(source, MetaDict(row.destination, file, me), options), "plan");
    const double plan_seconds = sdrt::bench::Reduce(MPI_Wtime() - start, MPI_MAX);
    sdrt::TransferStats stats;
    const sdrt::bench::Spread reshard = Time(
        repeat, [&] { destination = MetaDict(row.destination, file, me); },
        [&] { Check(sdrt::ExecuteReshard(plan, source, destination, &stats), "reshard"); });
    const int64_t wrong =
        sdrt::bench::Reduce(Wrong(destination, row.destination, full, file, me), MPI_SUM);
    const double funnel = row.funnel == Row::Funnel::kOneWorld
                              ? FunnelOneWorld(row, *world, source, file, repeat, bucket_mib)
                              : FunnelRelay(row, *world, source, full, file, repeat, bucket_mib);
    const int64_t busiest = std::max(stats.max_sent_bytes, stats.max_received_bytes);
    const double floor = busiest / p2p_bw;
    const int64_t buffer = sdrt::bench::Reduce(stats.buffer_bytes, MPI_MAX);
    if (me == 0) {
      std::printf("%-17s %9.1f %9.1f [%.0f..%.0f] %10s %10.1f %8s %9.2f %9.3f %6lld %7.1f %6lld\n",
                  row.name.c_str(), plan_seconds * 1e3, reshard.median * 1e3, reshard.min * 1e3,
                  reshard.max * 1e3,
                  absl::StrFormat("%.1f", funnel * 1e3).c_str(), floor * 1e3,
                  absl::StrFormat("%.2f", reshard.median / funnel).c_str(),
                  reshard.median / floor,
                  static_cast<double>(stats.wire_bytes) / std::max<int64_t>(1, stats.optimum_bytes),
                  static_cast<long long>(stats.exchanges), buffer / 1048576.0,
                  static_cast<long long>(wrong));
      results.push_back({{"row", row.name},
                         {"plan_seconds", plan_seconds},
                         {"reshard_seconds", reshard.median},
                         {"reshard_min", reshard.min},
                         {"reshard_max", reshard.max},
                         {"funnel_seconds", funnel},
                         {"floor_seconds", floor},
                         {"p2p_bytes_per_second", p2p_bw},
                         {"wire_bytes", stats.wire_bytes},
                         {"optimum_bytes", stats.optimum_bytes},
                         {"max_sent_bytes", stats.max_sent_bytes},
                         {"max_received_bytes", stats.max_received_bytes},
                         {"exchanges", stats.exchanges},
                         {"buffer_bytes_max_rank", buffer},
                         {"wrong", wrong}});
    }
  }
  if (me == 0 && !json_path.empty()) {
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f != nullptr) {
      std::fprintf(f, "%s\n", results.dump(2).c_str());
      std::fclose(f);
    }
  }
  return 0;
}
