// Weight sync, as an RL loop does it: a trainer holds its weights as FSDP shards (DTensors,
// Shard(0)) on ranks 0..T-1, an inference engine holds the same weights as TP shards on
// ranks T..N-1, and after every training step the new weights go from the trainer's
// layout to the engine's, peer to peer, through a plan built once (PlanReshard) and
// executed every step (ExecuteReshard). Run: mpiexec -n 8 weight_sync [--steps 3]
// (4 trainer ranks, 4 engine ranks; any even N works, and N = 1 puts both on one rank).
//
// As two jobs (README.md): `mpiexec -n T weight_sync --accept PORT_FILE` is the trainer,
// `mpiexec -n E weight_sync --connect PORT_FILE` the engine; they meet through
// MpiCommunicator::Accept / Connect (the trainer's ranks first). With `--restarts K` the
// trainer serves K + 1 engine jobs one after another: it syncs each until a step fails (the
// engine left: it exits after --steps steps, or is killed with --die), then accepts the
// next, plans again and goes on, printing its resident memory and open descriptors.
//
// Each step the trainer adds the step number to every weight (a stand-in for an optimizer
// step); each engine rank checks its pieces against the values it expects and rank 0
// prints one line per step.
#include <mpi.h>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace {

struct Weight {
  const char* name;
  sdrt::IntVector shape;
  const char* engine;  // the engine's placement (TP): column or row parallel
};

const Weight kWeights[] = {
    {"embed_tokens.weight", {1000, 64}, "[S(0)]"},
    {"layers.0.self_attn.qkv_proj.weight", {192, 64}, "[S(0)]"},
    {"layers.0.self_attn.o_proj.weight", {64, 64}, "[S(1)]"},
    {"layers.0.mlp.gate_up_proj.weight", {512, 64}, "[S(0)]"},
    {"layers.0.mlp.down_proj.weight", {64, 256}, "[S(1)]"},
    {"layers.0.input_layernorm.weight", {64}, "[R]"},
    {"lm_head.weight", {1000, 64}, "[S(0)]"},
};

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "weight_sync: %s: %s\n", what, status.ToString().c_str());
  sdrt::MpiCommunicator::AbortJob(1);
}

// The full weight at `step`: element i is (i % 97) / 8 + step, in float32.
sdrt::Tensor FullWeight(const Weight& w, int step) {
  sdrt::Tensor t = *sdrt::Tensor::Empty(w.shape, sdrt::DType::kFloat32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(i % 97) / 8 + step;
  return t;
}

std::shared_ptr<const sdrt::DeviceMesh> MeshOver(int64_t from, int64_t to) {
  std::vector<int64_t> ranks;
  for (int64_t r = from; r < to; ++r) ranks.push_back(r);
  return std::make_shared<const sdrt::DeviceMesh>(
      *sdrt::DeviceMesh::Create({static_cast<int64_t>(ranks.size())}, ranks));
}

struct Args {
  int steps = 3;
  std::string accept;    // --accept PORT_FILE: the trainer job
  std::string connect;   // --connect PORT_FILE: the engine job
  int restarts = 0;      // --restarts K: the trainer serves K + 1 engine jobs
  bool die = false;      // --die: the engine kills itself after its steps
  double timeout = 600;  // --timeout SECONDS: every wait's deadline
};

// The two sides over `comm`: trainer ranks [0, trainers), engine ranks [trainers, size).
struct Sides {
  int rank = 0;
  int trainers = 1;
  std::shared_ptr<const sdrt::DeviceMesh> trainer_mesh, engine_mesh;
  bool is_trainer = false, is_engine = false;
};

Sides SidesOf(const sdrt::Communicator& comm, int trainers) {
  Sides s;
  s.rank = comm.rank();
  s.trainers = trainers;
  const int n = comm.size();
  s.trainer_mesh = MeshOver(0, trainers);
  s.engine_mesh = n > 1 ? MeshOver(trainers, n) : MeshOver(0, 1);
  s.is_trainer = s.rank < trainers;
  s.is_engine = s.engine_mesh->Coordinate(s.rank).has_value();
  return s;
}

// The engine's layout: meta DTensors (sdrt allocates the locals on the first step and
// writes into them in place on the later ones).
sdrt::Map EngineLayout(const Sides& s) {
  sdrt::Map engine;
  if (!s.is_engine) return engine;
  for (const Weight& w : kWeights) {
    const std::vector<sdrt::Placement> p = *sdrt::ParsePlacements(w.engine);
    const sdrt::IntVector local = *sdrt::ComputeLocalShape(w.shape, *s.engine_mesh, p, s.rank);
    engine.Set(w.name,
               sdrt::Value(*sdrt::DTensor::Make(*sdrt::Tensor::Meta(local, sdrt::DType::kFloat32),
                                                s.engine_mesh, p, w.shape)));
  }
  return engine;
}

// The trainer's weights after `step`.
sdrt::Map TrainerAt(const Sides& s, int step) {
  sdrt::Map m;
  if (!s.is_trainer) return m;
  for (const Weight& w : kWeights) {
    m.Set(w.name, sdrt::Value(*sdrt::DistributeTensor(FullWeight(w, step), s.trainer_mesh,
                                                      {sdrt::Placement::Shard(0)}, s.rank)));
  }
  return m;
}

void PrintPlan(const Sides& s, const sdrt::ReshardPlan& plan) {
  const auto plural = [](int64_t k) { return k == 1 ? "" : "s"; };
  std::printf(
      "plan: %zu weights from %d trainer rank%s (fsdp) to %lld engine rank%s (tp); "
      "%lld bytes on the wire per step (the optimum: %lld), %lld exchange%s\n",
      plan.paths().size(), s.trainers, plural(s.trainers),
      static_cast<long long>(s.engine_mesh->num_ranks()), plural(s.engine_mesh->num_ranks()),
      static_cast<long long>(plan.stats().wire_bytes),
      static_cast<long long>(plan.stats().optimum_bytes),
      static_cast<long long>(plan.stats().exchanges), plural(plan.stats().exchanges));
  std::fflush(stdout);
}

// One step: the trainer's weights of `step` into `engine`, checked on the engine ranks.
// `wrong` gets the number of weights that differ, summed over every rank.
absl::Status Step(sdrt::Communicator& comm, const Sides& s, const sdrt::ReshardPlan& plan,
                  sdrt::Map& engine, int step, int64_t* wrong) {
  const sdrt::Map trainer = TrainerAt(s, step);
  const auto start = std::chrono::steady_clock::now();
  sdrt::TransferStats stats;
  if (absl::Status st = sdrt::ExecuteReshard(plan, trainer, engine, &stats); !st.ok()) return st;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  sdrt::Tensor count = *sdrt::Tensor::Empty({1}, sdrt::DType::kInt64);
  int64_t& mine = count.data<int64_t>()[0];
  mine = 0;
  if (s.is_engine) {
    for (const Weight& w : kWeights) {
      const sdrt::DTensor& got = engine.Find(w.name)->as_dtensor();
      const sdrt::DTensor want =
          *sdrt::DistributeTensor(FullWeight(w, step), s.engine_mesh, got.placements(), s.rank);
      if (want.local().nbytes() > 0 &&
          std::memcmp(got.local().data_ptr(), want.local().data_ptr(), want.local().nbytes()) !=
              0) {
        ++mine;
      }
    }
  }
  if (absl::Status st = comm.AllReduce(count, sdrt::ReduceOp::kSum); !st.ok()) return st;
  *wrong = count.data<int64_t>()[0];
  if (s.rank == 0) {
    std::printf("step %d: %.3f ms, rank 0 sent %lld bytes; engine weights %s\n", step, ms,
                static_cast<long long>(stats.sent_bytes),
                *wrong == 0 ? "match the trainer's" : "DIFFER");
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

// This process's resident memory in kB and its open file descriptors.
void Usage(long* rss_kb, int* fds) {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  *rss_kb = resident * (sysconf(_SC_PAGESIZE) / 1024);
  *fds = -1;  // the directory's own descriptor
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) *fds += e->d_name[0] != '.';
    closedir(d);
  }
}

// The trainer of --restarts: serves `args.restarts` + 1 engine jobs, each until a step
// fails, with the step count going on from one engine to the next.
int ServeEngines(const Args& args, std::chrono::milliseconds timeout) {
  // The trainer's own ranks, for agreeing on the last good step under the same deadline.
  auto trainers = sdrt::MpiCommunicator::World(timeout);
  if (!trainers.ok()) return Fail("MPI", trainers.status());
  sdrt::Tensor last_good = *sdrt::Tensor::Empty({1}, sdrt::DType::kInt64);
  int step = 0;
  for (int round = 0; round <= args.restarts; ++round) {
    auto comm = sdrt::MpiCommunicator::Accept(args.accept, timeout);
    if (!comm.ok()) return Fail("Accept", comm.status());
    int job = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &job);
    const Sides s = SidesOf(**comm, job);
    std::string start = std::to_string(step);  // where this engine's steps begin
    if (absl::Status st = (*comm)->BroadcastBytes(&start, 0); !st.ok()) return Fail("start", st);
    sdrt::Map engine = EngineLayout(s);
    sdrt::ReshardOptions options;
    options.comm = comm->get();
    absl::StatusOr<sdrt::ReshardPlan> plan = sdrt::PlanReshard(TrainerAt(s, step), engine,
                                                               options);
    if (!plan.ok()) return Fail("PlanReshard", plan.status());
    if (s.rank == 0) PrintPlan(s, *plan);
    absl::Status st;
    int64_t wrong = 0;
    auto failed_at = std::chrono::steady_clock::now();
    while (st.ok() && wrong == 0) {
      failed_at = std::chrono::steady_clock::now();
      st = Step(**comm, s, *plan, engine, ++step, &wrong);
    }
    if (wrong != 0) return 1;
    // The step that failed is sent again to the next engine. A peer that dies mid-step can
    // leave the trainer's ranks disagreeing on whether that step completed (one finished its
    // part, another timed out): they agree, over their own job, on the last step all of
    // them completed.
    last_good.data<int64_t>()[0] = step - 1;
    if (absl::Status agreed = (*trainers)->AllReduce(last_good, sdrt::ReduceOp::kMin);
        !agreed.ok()) {
      return Fail("agreeing on the last good step", agreed);
    }
    step = static_cast<int>(last_good.data<int64_t>()[0]);
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - failed_at);
    long rss = 0;
    int fds = 0;
    Usage(&rss, &fds);
    if (s.rank == 0) {
      std::printf("engine %d gone after %lld ms: %s\ntrainer after engine %d: rss %ld kB, "
                  "%d open fds\n", round, static_cast<long long>(waited.count()),
                  std::string(absl::StatusCodeToString(st.code())).c_str(), round, rss, fds);
      std::fflush(stdout);
    }
  }
  return 0;
}

// A bad command line: the usage and exit 2, before MPI starts.
int BadFlag(const char* flag, const char* why) {
  std::fprintf(stderr,
               "weight_sync: %s: %s\nusage: weight_sync [--steps K] [--timeout SECONDS] "
               "[--accept PORT_FILE [--restarts R] | --connect PORT_FILE [--die]]\n",
               flag, why);
  return 2;
}

// `value` as a whole number in [lo, hi] into *out; false otherwise.
bool WholeNumber(const char* value, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

int Parse(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--die") {
      args->die = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") return BadFlag(argv[i], "the flags are");
    if (flag != "--steps" && flag != "--accept" && flag != "--connect" && flag != "--restarts" &&
        flag != "--timeout") {
      return BadFlag(argv[i], "unknown flag");
    }
    if (i + 1 >= argc) return BadFlag(argv[i], "needs a value");
    const char* value = argv[++i];
    if (flag == "--steps") {
      if (!WholeNumber(value, 1, 1000000, &args->steps)) {
        return BadFlag(value, "--steps takes 1 to 1000000");
      }
    } else if (flag == "--accept" || flag == "--connect") {
      if (value[0] == '\0' || value[0] == '-') return BadFlag(flag.c_str(), "needs a PORT_FILE");
      (flag == "--accept" ? args->accept : args->connect) = value;
    } else if (flag == "--restarts") {
      if (!WholeNumber(value, 0, 1000, &args->restarts)) {
        return BadFlag(value, "--restarts takes 0 to 1000");
      }
    } else {
      char* end = nullptr;
      args->timeout = std::strtod(value, &end);
      if (end == value || *end != '\0' || !(args->timeout >= 0.001 && args->timeout <= 86400)) {
        return BadFlag(value, "--timeout takes seconds in [0.001, 86400]");
      }
    }
  }
  // One side each: the trainer's flags with --accept, the engine's with --connect.
  if (!args->accept.empty() && !args->connect.empty()) {
    return BadFlag("--connect", "goes without --accept (one job is one side)");
  }
  if (args->restarts > 0 && args->accept.empty()) {
    return BadFlag("--restarts", "is the trainer's: it goes with --accept");
  }
  if (args->die && args->connect.empty()) {
    return BadFlag("--die", "is the engine's: it goes with --connect");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (int rc = Parse(argc, argv, &args); rc != 0) return rc;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout * 1000));
  if (!args.accept.empty() && args.restarts > 0) return ServeEngines(args, timeout);
  absl::StatusOr<std::unique_ptr<sdrt::MpiCommunicator>> comm =
      !args.accept.empty()    ? sdrt::MpiCommunicator::Accept(args.accept, timeout)
      : !args.connect.empty() ? sdrt::MpiCommunicator::Connect(args.connect, timeout)
                              : sdrt::MpiCommunicator::World(timeout);
  if (!comm.ok()) return Fail("MPI", comm.status());
  int job = 0;  // this job's ranks
  MPI_Comm_size(MPI_COMM_WORLD, &job);
  const int n = (*comm)->size();
  const int trainers = !args.accept.empty() ? job : !args.connect.empty() ? n - job
                       : n > 1 ? n / 2 : 1;
  const Sides s = SidesOf(**comm, trainers);
  int first = 1;  // the trainer's step this engine starts at (a restarted engine's is later)
  if (!args.accept.empty() || !args.connect.empty()) {
    std::string start = "0";  // the trainer's (rank 0's) last step
    if (absl::Status st = (*comm)->BroadcastBytes(&start, 0); !st.ok()) return Fail("start", st);
    first = std::atoi(start.c_str()) + 1;
  }
  sdrt::Map engine = EngineLayout(s);
  sdrt::ReshardOptions options;
  options.comm = comm->get();
  absl::StatusOr<sdrt::ReshardPlan> plan = sdrt::PlanReshard(TrainerAt(s, first - 1), engine,
                                                             options);
  if (!plan.ok()) return Fail("PlanReshard", plan.status());
  if (s.rank == 0) PrintPlan(s, *plan);
  for (int step = first; step < first + args.steps; ++step) {
    int64_t wrong = 0;
    if (absl::Status st = Step(**comm, s, *plan, engine, step, &wrong); !st.ok()) {
      return Fail("ExecuteReshard", st);
    }
    if (wrong != 0) return 1;
  }
  if (!args.connect.empty()) {
    int job_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &job_rank);
    if (job_rank == 0) {
      std::printf("engine: steps %d to %d received, every weight as the trainer's%s\n", first,
                  first + args.steps - 1, args.die ? "; dying now" : "");
      std::fflush(stdout);
    }
    if (args.die) raise(SIGKILL);  // a crash: no MPI_Finalize, no goodbye
  }
  return 0;
}
