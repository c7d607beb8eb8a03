// load_bench: loading a full safetensors checkpoint into N ranks' shards, three ways on the
// same file in the same run (docs/PERFORMANCE.md: "every rank reading its own bytes at most
// 1.5x a plain pread of those bytes, with read amplification at most 1.05"):
//
//   floor  every rank preads exactly the bytes of its own pieces (load_workloads.h's
//          KeptRuns: torch.chunk arithmetic on the header, touching runs joined) back to back
//          into ONE preallocated, already touched buffer: the physical floor;
//   all    LoadStateDict (core/distributed/load_state_dict.h; `sdrt load --read all`): every
//          rank reads its own bytes into meta DTensors with the plan's placements
//          (ShardingPlan::MetaStateDict, as `sdrt load`), comm = MPI world, strict;
//   root   `sdrt load --read root`: rank 0 maps the file (a fresh CheckpointSource each
//          repetition, opened outside the timed region, so the mapping's page faults are
//          timed, as in a fresh process) and BroadcastStateDict sends every rank its pieces.
// and, to tell the cost of new memory from the rest, `fresh`: the floor's preads into a
// buffer allocated inside the timed region (one Tensor::Empty of the kept bytes: 2 MiB
// aligned, as sdrt's large locals), so fresh - floor is the first touch of
// the kept bytes, which any load returning new tensors pays.
//
// The file is put in the page cache first (rank 0 reads it whole; the fraction of its pages
// resident, from mincore, is printed before and after the timed runs). Every repetition
// runs the four in turn, the order rotating; each is timed from a barrier to the slowest
// rank's end (MPI_MAX). Outside the timed region: the meta state dict is copied afresh
// (freeing the previous result), rank 0's mapping reopened. The table gives median and
// [min..max] over the timed repetitions, all/floor and root/floor of the medians (and, per
// path, the median CPU time and voluntary context switches summed over ranks, steadier than
// wall time on a shared machine; MPI polls, so root's CPU time includes waiting), LoadStats
// of the last `all` run (read amplification = bytes read / bytes kept, the most of any rank;
// preads, the most of any rank) and two checks after the timed runs: #wrong = tensors whose
// piece differs between `all` and `root`, summed over ranks (must be 0), and #floor = pieces
// of `all` that differ from the floor buffer's bytes (must be 0; LoadStats::bytes_kept must
// equal the floor's bytes on every rank, else the run fails).
//
// Run:  load_bench --make llama|small|small100k F  (rank 0 writes workload F, load_workloads.h)
//       mpiexec -n N load_bench --file F --plan fsdp|tp [--repeat K] [--warmup W] [--json PATH]
//                  [--staging-buffers B]   (LoadOptions::staging_buffers; 1: no reader thread)
//                  [--share-reads 0|1]     (LoadOptions::share_reads: read once per node)
//                  [--map-results 0|1]     (LoadOptions::map_results: contiguous pieces
//                                           mapped, not read; `all` maps the file each time)
//                  [--readers R]           (LoadOptions::readers: reader threads per rank;
//                                           floor and fresh then pread with R threads too)
#include <fcntl.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/bench/load_workloads.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/bench/mpi_bench_util.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/tensor.h"

namespace {

using sdrt::CheckpointSource;
using sdrt::Map;
using sdrt::Tensor;
using sdrt::Value;

using sdrt::bench::Check;
using sdrt::bench::Reduce;
using sdrt::bench::Spread;
using sdrt::bench::Summarize;

// One way of loading: `prepare` runs outside the timed region, `run` inside.
struct Path {
  std::string name;
  std::function<void()> prepare;
  std::function<void()> run;
  std::vector<double> seconds;
  std::vector<double> cpu_seconds;  // user + system, all threads, summed over ranks
  std::vector<double> switches;     // voluntary context switches, summed over ranks
};

// CPU seconds (user + system) and voluntary context switches of this process so far.
std::pair<double, double> Usage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
              static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6,
          static_cast<double>(usage.ru_nvcsw)};
}

// Reads every file of `source` once, whole (rank 0 only: the ranks share the page cache).
void WarmPageCache(const CheckpointSource& source) {
  std::vector<uint8_t> chunk(size_t{8} << 20);
  for (const sdrt::CheckpointSourceFile& f : source.files()) {
    const int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) Check(absl::NotFoundError(f.path), "warm");
    while (read(fd, chunk.data(), chunk.size()) > 0) {
    }
    close(fd);
  }
}

double Resident(const CheckpointSource& source) {
  double least = 1;
  for (const sdrt::CheckpointSourceFile& f : source.files()) {
    least = std::min(least, Check(sdrt::bench::ResidentFraction(f.path), "mincore"));
  }
  return least;
}

// This rank's piece of `name` in a loaded state dict, contiguous.
Tensor Piece(const Map& local, const std::string& name) {
  const Value* v = local.Find(name);
  if (v == nullptr) return Tensor();
  const Tensor& t = v->kind() == sdrt::ValueKind::kDTensor  ? v->as_dtensor().local()
                    : v->kind() == sdrt::ValueKind::kTensor ? v->as_tensor()
                                                            : Tensor();
  return t.defined() && !t.is_meta() ? Check(t.Contiguous(), "contiguous") : Tensor();
}

bool SameBytes(const Tensor& t, const uint8_t* want, int64_t bytes) {
  return t.defined() && t.nbytes() == bytes &&
         (bytes == 0 || std::memcmp(t.data_ptr(), want, static_cast<size_t>(bytes)) == 0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string file, plan_name = "fsdp", json_path, make;
  int repeat = 5, warmup = 1, staging_buffers = sdrt::LoadOptions().staging_buffers;
  bool share_reads = false;
  bool map_results = false;
  int readers = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--file") file = argv[i + 1];
    if (a == "--plan") plan_name = argv[i + 1];
    if (a == "--json") json_path = argv[i + 1];
    if (a == "--repeat") repeat = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--warmup") warmup = std::max(0, std::atoi(argv[i + 1]));
    if (a == "--staging-buffers") staging_buffers = std::atoi(argv[i + 1]);
    if (a == "--share-reads") share_reads = std::atoi(argv[i + 1]) != 0;
    if (a == "--map-results") map_results = std::atoi(argv[i + 1]) != 0;
    if (a == "--readers") readers = std::max(1, std::atoi(argv[i + 1]));
    if (a == "--make" && i + 2 < argc) {
      make = argv[i + 1];
      file = argv[i + 2];
    }
  }
  std::unique_ptr<sdrt::MpiCommunicator> world = Check(sdrt::MpiCommunicator::World(), "MPI world");
  sdrt::bench::BenchRank() = world->rank();
  const int me = world->rank();
  const int n = world->size();
  if (file.empty()) {
    if (me == 0) std::fprintf(stderr, "load_bench: --file F (or --make llama|small|small100k F)\n");
    return 2;
  }
  if (!make.empty()) {
    if (me == 0) Check(sdrt::bench::WriteWorkload(make, file), "make " + file);
    return 0;
  }

  CheckpointSource source = Check(CheckpointSource::Open(file), "open " + file);
  const double resident_before = me == 0 ? Resident(source) : 0;
  double warm_seconds = MPI_Wtime();
  if (me == 0) WarmPageCache(source);
  warm_seconds = MPI_Wtime() - warm_seconds;
  MPI_Barrier(MPI_COMM_WORLD);

  auto mesh = std::make_shared<const sdrt::DeviceMesh>(
      Check(sdrt::DeviceMesh::Create({static_cast<int64_t>(n)}), "mesh"));
  const sdrt::ShardingPlan plan = Check(sdrt::ShardingPlan::Builtin(plan_name), "plan");
  const Map meta = Check(plan.MetaStateDict(source.TensorSpecs(), mesh, me), "MetaStateDict");

  // floor
  const std::vector<sdrt::bench::ByteRun> runs =
      Check(sdrt::bench::KeptRuns(source, plan, *mesh, me), "kept runs");
  int64_t kept = 0;
  for (const sdrt::bench::ByteRun& r : runs) kept += r.bytes;
  std::vector<uint8_t> floor_buffer(static_cast<size_t>(kept), 0);
  std::vector<int> fds;
  for (const sdrt::CheckpointSourceFile& f : source.files()) {
    fds.push_back(open(f.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fds.back() < 0) Check(absl::NotFoundError(f.path), "open");
  }
  int64_t floor_preads = 0;
  // all
  Map all_local;
  sdrt::LoadStats stats;
  sdrt::LoadOptions load_options;
  load_options.comm = world.get();
  load_options.read = sdrt::ReadMode::kAll;
  load_options.strict = true;
  load_options.stats = &stats;
  load_options.staging_buffers = staging_buffers;
  load_options.share_reads = share_reads;
  load_options.map_results = map_results;
  load_options.readers = readers;
  // root
  Map root_local, full;
  std::optional<CheckpointSource> mapped;
  sdrt::BroadcastOptions bcast_options;
  bcast_options.comm = world.get();
  bcast_options.device = sdrt::Device::CPU();
  bcast_options.strict = true;

  std::optional<Tensor> fresh_buffer;
  std::vector<Path> paths(4);
  paths[0].name = "floor";
  paths[0].prepare = [] {};
  paths[0].run = [&] {
    floor_preads = Check(sdrt::bench::PreadRuns(fds, runs, floor_buffer.data(), readers), "floor");
  };
  paths[1].name = "all";
  paths[1].prepare = [&] { all_local = meta; };
  paths[1].run = [&] { Check(sdrt::LoadStateDict(source, all_local, load_options), "load"); };
  paths[2].name = "root";
  paths[2].prepare = [&] {
    root_local = meta;
    if (me != 0) return;
    full = Map();
    mapped.reset();
    mapped = Check(CheckpointSource::Open(file), "map " + file);
    full.Reserve(mapped->tensors().size());
    for (const sdrt::CheckpointSourceTensor& t : mapped->tensors()) {
      full.Set(t.name, Value(Check(mapped->Get(t.name), "get " + t.name)));
    }
  };
  paths[2].run = [&] {
    Check(sdrt::BroadcastStateDict(full, root_local, bcast_options), "broadcast");
  };
  paths[3].name = "fresh";
  paths[3].prepare = [&] { fresh_buffer.reset(); };
  paths[3].run = [&] {
    fresh_buffer = Check(Tensor::Empty({kept}, sdrt::DType::kUInt8), "fresh buffer");
    Check(sdrt::bench::PreadRuns(fds, runs, static_cast<uint8_t*>(fresh_buffer->data_ptr()),
                                 readers),
          "fresh");
  };
  for (int it = 0; it < warmup + repeat; ++it) {
    for (size_t k = 0; k < paths.size(); ++k) {
      Path& p = paths[(k + static_cast<size_t>(it)) % paths.size()];
      p.prepare();
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      const std::pair<double, double> before = Usage();
      p.run();
      const std::pair<double, double> after = Usage();
      const double seconds = Reduce(MPI_Wtime() - start, MPI_MAX);
      const double cpu = Reduce(after.first - before.first, MPI_SUM);
      const double switches = Reduce(after.second - before.second, MPI_SUM);
      if (it >= warmup) {
        p.seconds.push_back(seconds);
        p.cpu_seconds.push_back(cpu);
        p.switches.push_back(switches);
      }
    }
  }

  // Checks: all vs root, all vs the floor's bytes, LoadStats vs the floor's bytes.
  int64_t wrong = 0, floor_wrong = 0;
  int64_t at = 0;
  for (const sdrt::CheckpointSourceTensor& t : source.tensors()) {
    const Tensor a = Piece(all_local, t.name);
    const Tensor b = Piece(root_local, t.name);
    const bool same =
        a.defined() && SameBytes(b, static_cast<const uint8_t*>(a.data_ptr()), a.nbytes());
    wrong += same ? 0 : 1;
    const int64_t bytes = a.defined() ? a.nbytes() : 0;
    const bool in_floor =
        a.defined() && at + bytes <= kept && SameBytes(a, floor_buffer.data() + at, bytes);
    floor_wrong += in_floor ? 0 : 1;
    at += bytes;
  }
  wrong = Reduce(wrong, MPI_SUM);
  floor_wrong = Reduce(floor_wrong, MPI_SUM);
  const int64_t kept_mismatch = Reduce(int64_t{stats.bytes_kept != kept || at != kept}, MPI_SUM);
  const double amplification = Reduce(stats.read_amplification(), MPI_MAX);
  const int64_t preads = Reduce(stats.preads, MPI_MAX);
  const int64_t reads = Reduce(stats.reads, MPI_MAX);
  const int64_t most_kept = Reduce(kept, MPI_MAX);
  const int64_t floor_calls = Reduce(floor_preads, MPI_MAX);
  const int64_t total_read = Reduce(stats.bytes_read, MPI_SUM);
  const int64_t total_mapped = Reduce(stats.bytes_mapped, MPI_SUM);
  const double resident_after = me == 0 ? Resident(source) : 0;

  if (me == 0) {
    const Spread f = Summarize(paths[0].seconds);
    const Spread a = Summarize(paths[1].seconds);
    const Spread r = Summarize(paths[2].seconds);
    std::printf(
        "# %s: %zu tensors, %lld bytes; %d ranks, plan %s; page cache: %.1f%% resident, rank 0 "
        "read it whole (%.0f ms), %.1f%% resident after the runs; %d timed repetitions after %d "
        "warm-up, order rotating\n",
        file.c_str(), source.tensors().size(), static_cast<long long>(source.total_bytes()), n,
        plan_name.c_str(), resident_before * 100, warm_seconds * 1e3, resident_after * 100, repeat,
        warmup);
    std::printf("# ms: median [min..max] of the slowest rank; kept: the most bytes a rank keeps\n");
    std::printf("%5s %4s %12s %9s %17s %9s %17s %6s %9s %17s %6s %6s %7s %7s %6s %6s\n", "ranks",
                "plan", "kept", "floor", "[min..max]", "all", "[min..max]", "a/f", "root",
                "[min..max]", "r/f", "ampl", "preads", "fpreads", "#wrong", "#floor");
    const auto mm = [](const Spread& s) {
      return absl::StrFormat("[%.1f..%.1f]", s.min * 1e3, s.max * 1e3);
    };
    std::printf(
        "%5d %4s %12lld %9.2f %17s %9.2f %17s %6.2f %9.2f %17s %6.2f %6.3f %7lld %7lld "
        "%6lld %6lld\n",
        n, plan_name.c_str(), static_cast<long long>(most_kept), f.median * 1e3, mm(f).c_str(),
        a.median * 1e3, mm(a).c_str(), a.median / f.median, r.median * 1e3, mm(r).c_str(),
        r.median / f.median, amplification, static_cast<long long>(preads),
        static_cast<long long>(floor_calls), static_cast<long long>(wrong),
        static_cast<long long>(floor_wrong));
    // Every byte of these workloads is kept by some rank: the distinct bytes are the file's.
    std::printf("# all: bytes read summed over the ranks %.3fx the file's tensor bytes%s\n",
                static_cast<double>(total_read) / static_cast<double>(source.total_bytes()),
                share_reads ? " (--share-reads 1: once per node)" : "");
    if (map_results) {
      std::printf("# all: bytes mapped, not read, summed over the ranks %.3fx the file's\n",
                  static_cast<double>(total_mapped) / static_cast<double>(source.total_bytes()));
    }
    for (const Path& p : paths) {
      const Spread w = Summarize(p.seconds);
      std::printf(
          "# %-5s %8.2f ms %17s (%.2fx floor); CPU %.1f ms (user + system, summed over ranks), "
          "%.0f voluntary context switches (medians)\n",
          p.name.c_str(), w.median * 1e3, mm(w).c_str(), w.median / f.median,
          Summarize(p.cpu_seconds).median * 1e3, Summarize(p.switches).median);
    }
    if (!json_path.empty()) {
      nlohmann::json out = {{"file", file},
                            {"tensors", source.tensors().size()},
                            {"bytes", source.total_bytes()},
                            {"ranks", n},
                            {"plan", plan_name},
                            {"kept_bytes_max", most_kept},
                            {"bytes_read_sum", total_read},
                            {"bytes_mapped_sum", total_mapped},
                            {"resident_before", resident_before},
                            {"resident_after", resident_after},
                            {"read_amplification_max", amplification},
                            {"preads_max", preads},
                            {"reads_max", reads},
                            {"floor_preads_max", floor_calls},
                            {"wrong_tensors", wrong},
                            {"floor_wrong_tensors", floor_wrong}};
      for (const Path& p : paths) {
        const Spread s = Summarize(p.seconds);
        out[p.name] = {{"median_ms", s.median * 1e3},
                       {"min_ms", s.min * 1e3},
                       {"max_ms", s.max * 1e3},
                       {"runs_ms", p.seconds},
                       {"cpu_ms", Summarize(p.cpu_seconds).median * 1e3},
                       {"voluntary_switches", Summarize(p.switches).median}};
      }
      out["all_over_floor"] = a.median / f.median;
      out["root_over_floor"] = r.median / f.median;
      std::ofstream(json_path) << out.dump(2) << "\n";
    }
    if (kept_mismatch != 0) {
      std::printf(
          "# FAILED: LoadStats::bytes_kept differs from the floor's bytes on %lld rank(s)\n",
          static_cast<long long>(kept_mismatch));
    }
  }
  for (int fd : fds) close(fd);
  world.reset();
  return wrong == 0 && floor_wrong == 0 && kept_mismatch == 0 ? 0 : 1;
}
