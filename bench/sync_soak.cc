// `mpiexec -n N sync_soak --op sync|load|gather [--steps K] [--scale S] [--warmup W]
//  [--json PATH] [--trace-step K] [--max-allocs-per-step A] [--max-rss-growth F]`: one call
// made K times in a steady loop (issue 33, "A thousand syncs"), every step checked bit for
// bit, with its heap allocations (bench/alloc_counter.h: every operator new and malloc of
// the process, on every thread, inside the call; the MPI library's own mallocs apart), host
// registrations (HostPinningCountsSoFar, cuda/runtime.h: cudaHostRegister and cudaHostAlloc
// calls; 0 on a CPU run by construction), its time (steady_clock, the slowest rank's per
// step) and the resident memory after step min(10, K) and after step K (and each rank's
// private part after steps 10, 30, 100, 300, 1,000, ... and K). The baseline, in the
// same run: after each step every rank copies model bytes / N with memcpy between two
// buffers of its own (the slowest rank's time), so that a spread of step times can be told
// from the machine's own. Between steps the ranks meet in the communicator's Barrier, whose
// wait gives the core away (MPI_Barrier spins: with more ranks than cores a rank done early
// held the core that a rank still in its call needed, and steps took a scheduler tick). The model:
// tiny-llama at --scale S (default 1), float32 (bench/soak_state.h). Ops:
//   sync    BindReshard once: a trainer (fsdp, Shard(0)) on ranks [0, N/2), an engine (tp) on
//           [N/2, N) (both on rank 0 for N = 1); each step the trainer writes the step's
//           values into its locals in place, BoundReshard::Execute, the engine checks them;
//   load    LoadStateDict (kAll) of a safetensors file written once into the same tp
//           locals on every rank, poisoned before each step;
//   gather  GatherStateDict of fsdp locals over every rank (rewritten each step), one shot:
//           every rank gets full tensors, checked and dropped.
// Steps after the first --warmup W (default 1, fewer than K) are the steady state the figures and
// the limits are about. Exit 1 when a step fails or differs, or (given) a rank allocates more than
// A times outside the MPI library in a steady step, or its private resident memory (all but shared
// memory, which here is MPI's intranode segments: their pages become resident as the transport
// first cycles through them, up to their fixed size) grows by more than the fraction F from step
// min(10, K) to step K; 2 for bad arguments.
// --trace-step K writes a backtrace of every allocation outside MPI in step K to stderr
// (bench/RESULTS.md, "A thousand syncs", says how to read them).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sdrt/bench/alloc_counter.h"
#include "sdrt/bench/mpi_bench_util.h"
#include "sdrt/bench/soak_report.h"
#include "sdrt/bench/soak_state.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/cuda/runtime.h"

namespace {

using sdrt::bench::Check;
using sdrt::bench::SoakSide;

struct Args {
  std::string op;
  int64_t steps = 100;
  int64_t warmup = 1;
  double scale = 1;
  std::string json;
  int64_t trace_step = 0;
  int64_t max_allocs = -1;    // -1: no limit
  double max_rss_growth = -1;  // -1: no limit
};

int Usage(const char* why) {
  std::fprintf(stderr,
               "sync_soak: %s\nusage: sync_soak --op sync|load|gather [--steps K] [--scale S] "
               "[--warmup W] [--json PATH] [--trace-step K] [--max-allocs-per-step A] "
               "[--max-rss-growth F]\n",
               why);
  return 2;
}

std::optional<Args> Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return std::nullopt;
    const char* v = argv[++i];
    char* end = nullptr;
    if (flag == "--op") {
      a.op = v;
    } else if (flag == "--json") {
      a.json = v;
    } else if (flag == "--scale" || flag == "--max-rss-growth") {
      (flag == "--scale" ? a.scale : a.max_rss_growth) = std::strtod(v, &end);
    } else if (flag == "--steps" || flag == "--warmup" || flag == "--trace-step" ||
               flag == "--max-allocs-per-step") {
      int64_t& field = flag == "--steps"        ? a.steps
                       : flag == "--warmup"     ? a.warmup
                       : flag == "--trace-step" ? a.trace_step
                                                : a.max_allocs;
      field = std::strtoll(v, &end, 10);
    } else {
      return std::nullopt;
    }
    if (end != nullptr && *end != '\0') return std::nullopt;
  }
  if (a.op != "sync" && a.op != "load" && a.op != "gather") return std::nullopt;
  if (a.steps < 1 || a.warmup < 0 || a.warmup >= a.steps || a.scale <= 0) return std::nullopt;
  return a;
}

std::shared_ptr<const sdrt::DeviceMesh> MeshOver(int64_t from, int64_t to) {
  std::vector<int64_t> ranks;
  for (int64_t r = from; r < to; ++r) ranks.push_back(r);
  return std::make_shared<const sdrt::DeviceMesh>(Check(
      sdrt::DeviceMesh::Create({static_cast<int64_t>(ranks.size())}, ranks), "mesh"));
}

// "rank 2" or "ranks 0-3": ranks [from, to).
std::string Ranks(int64_t from, int64_t to) {
  return to - from == 1 ? "rank " + std::to_string(from)
                        : "ranks " + std::to_string(from) + "-" + std::to_string(to - 1);
}

int64_t Pins() {
  const sdrt::HostPinningCounts c = sdrt::HostPinningCountsSoFar();
  return c.registrations + c.allocations;
}

// One op of the soak: before (outside the counted call), the call, the check after it.
struct Op {
  std::function<void(int64_t step)> before;
  std::function<absl::Status(int64_t step)> call;
  std::function<int64_t(int64_t step)> wrong;
  std::string layout;  // for the report
};

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Args> args = Parse(argc, argv);
  if (!args) return Usage("bad arguments");
  std::unique_ptr<sdrt::MpiCommunicator> world =
      Check(sdrt::MpiCommunicator::World(), "MPI world");
  const int rank = world->rank();
  const int n = world->size();
  sdrt::bench::BenchRank() = rank;
  const std::vector<sdrt::SafetensorsTensorSpec> model =
      Check(sdrt::bench::SoakModel(args->scale), "model");

  // Whatever an op keeps between steps lives here, made before the loop.
  std::optional<SoakSide> from, to;
  std::optional<sdrt::BoundReshard> bound;
  std::optional<sdrt::CheckpointSource> file;
  sdrt::LoadOptions load_options;
  sdrt::GatherOptions gather_options;
  sdrt::Map gathered;
  std::string path;
  Op op;
  if (args->op == "sync") {
    const int64_t trainers = n > 1 ? n / 2 : 1;
    from = Check(SoakSide::Make(model, "fsdp", MeshOver(0, trainers), rank), "trainer");
    to = Check(SoakSide::Make(model, "tp", n > 1 ? MeshOver(trainers, n) : MeshOver(0, 1), rank),
               "engine");
    sdrt::ReshardOptions options;
    options.comm = world.get();
    const sdrt::ReshardPlan plan = Check(sdrt::PlanReshard(from->map(), to->map(), options),
                                         "PlanReshard");
    bound = Check(sdrt::BindReshard(plan, from->map(), to->map()), "BindReshard");
    op.before = [&](int64_t step) { from->Write(step); };
    op.call = [&](int64_t) { return bound->Execute(); };
    op.wrong = [&](int64_t step) { return to->CountWrong(step); };
    op.layout = n > 1 ? "trainer fsdp on " + Ranks(0, trainers) + ", engine tp on " +
                            Ranks(trainers, n)
                      : "trainer fsdp and engine tp on rank 0";
  } else if (args->op == "load") {
    int64_t id = rank == 0 ? static_cast<int64_t>(getpid()) : 0;
    MPI_Bcast(&id, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    const char* tmp = std::getenv("TMPDIR");
    path = std::string(tmp != nullptr ? tmp : "/tmp") + "/sync_soak_" + std::to_string(id) +
           ".safetensors";
    if (rank == 0) Check(sdrt::bench::WriteSoakFile(model, 0, path), "writing " + path);
    MPI_Barrier(MPI_COMM_WORLD);
    file = Check(sdrt::CheckpointSource::Open(path), "opening " + path);
    to = Check(SoakSide::Make(model, "tp", MeshOver(0, n), rank), "locals");
    load_options.comm = world.get();
    load_options.read = sdrt::ReadMode::kAll;
    op.before = [&](int64_t) { to->Poison(); };
    op.call = [&](int64_t) { return sdrt::LoadStateDict(*file, to->map(), load_options).status(); };
    op.wrong = [&](int64_t) { return to->CountWrong(0); };
    op.layout = "tp on " + Ranks(0, n) + " from one safetensors file";
  } else {
    from = Check(SoakSide::Make(model, "fsdp", MeshOver(0, n), rank), "locals");
    gather_options.comm = world.get();
    op.before = [&](int64_t step) { from->Write(step); };
    op.call = [&](int64_t) -> absl::Status {
      absl::StatusOr<sdrt::Map> full = sdrt::GatherStateDict(from->map(), gather_options);
      if (!full.ok()) return full.status();
      gathered = *std::move(full);
      return absl::OkStatus();
    };
    op.wrong = [&](int64_t step) {
      const int64_t wrong = sdrt::bench::CountWrongFull(gathered, model, step);
      gathered = sdrt::Map();  // dropped: a one-shot gather keeps nothing
      return wrong;
    };
    op.layout = "fsdp on " + Ranks(0, n) + " to full tensors on every rank";
  }
  sdrt::bench::SoakRecord record(args->steps, std::min<int64_t>(10, args->steps));
  int64_t model_bytes = 0;
  for (const sdrt::SafetensorsTensorSpec& s : model) {
    int64_t numel = 1;
    for (const int64_t d : s.shape) numel *= d;
    model_bytes += numel * 4;
  }
  const size_t baseline_bytes = static_cast<size_t>(model_bytes / n);
  std::vector<char> baseline_from(baseline_bytes, 1), baseline_to(baseline_bytes, 0);
  for (int64_t step = 1; step <= args->steps; ++step) {
    op.before(step);
    Check(world->Barrier(), "barrier");
    if (step == args->trace_step) sdrt::bench::TraceAllocations(true);
    const sdrt::bench::AllocationCounts allocs = sdrt::bench::AllocationsSoFar();
    const int64_t pins = Pins();
    const auto start = std::chrono::steady_clock::now();
    const absl::Status status = op.call(step);
    const auto stop = std::chrono::steady_clock::now();
    record.Step(step, std::chrono::duration<double>(stop - start).count(),
                sdrt::bench::AllocationsSince(allocs), Pins() - pins);
    sdrt::bench::TraceAllocations(false);
    Check(status, args->op + " step " + std::to_string(step));
    record.Checked(step, op.wrong(step), sdrt::bench::ResidentMemory());
    Check(world->Barrier(), "barrier");
    baseline_from[static_cast<size_t>(step) % baseline_bytes] = static_cast<char>(step);
    const auto copy_start = std::chrono::steady_clock::now();
    std::memcpy(baseline_to.data(), baseline_from.data(), baseline_bytes);
    record.Baseline(step, std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                        copy_start).count());
  }
  if (!path.empty() && rank == 0) std::remove(path.c_str());

  sdrt::bench::SoakSetup setup;
  setup.op = args->op;
  setup.layout = op.layout;
  setup.ranks = n;
  setup.scale = args->scale;
  setup.tensors = static_cast<int64_t>(model.size());
  setup.model_bytes = model_bytes;
  setup.baseline_bytes = static_cast<int64_t>(baseline_bytes);
  setup.warmup = args->warmup;
  setup.max_allocs = args->max_allocs;
  setup.max_rss_growth = args->max_rss_growth;
  return sdrt::bench::ReportSoak(setup, record, args->json);
}
