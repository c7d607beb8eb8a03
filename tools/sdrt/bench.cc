// `mpiexec -n N sdrt bench [--workload llama|small|tiny|minilm|FILE] [--ops gather,...]
// [--bucket-mib M] [--iters K] [--warmup W] [--tensors T] [--inputs tensors|arena] [--json]`:
// GatherStateDict, BroadcastStateDict and DistributeStateDict over MPI on the CPU, each against one
// flat MPI collective (or memcpy) of the same bytes in the same run, printed in nccl-tests' columns
// with sdrt / flat, sdrt / fresh and the collectives per call; every byte of every result is
// checked (#wrong). The workloads are internal/bench_workloads.h's, the rows
// internal/bench_ops.h's; bench/peer/pytorch_distributed_peer.py runs the same with
// PyTorch. Needs MPI: in a build without it the command says so (exit 2).
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"
#if SDRT_CLI_HAVE_MPI
#include <mpi.h>
#include <sched.h>

#include <thread>

#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/bench_rows.h"
#include "sdrt/tools/sdrt/internal/bench_workloads.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/session.h"
#include "sdrt/version.h"
#endif

namespace sdrt::cli {
namespace {

#if SDRT_CLI_HAVE_MPI
struct BenchArgs {
  std::string workload = "llama";
  std::string ops = "gather,gather_r0_off,broadcast,distribute";
  double bucket_mib = 256;
  int iters = 5;
  int warmup = 1;
  int64_t tensors = 0;
  std::string inputs = "tensors";
  bool json = false;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

// The ops asked for, in kBenchOps order; InvalidArgument naming an unknown one.
absl::StatusOr<std::vector<std::string>> ParseOps(const std::string& text) {
  std::vector<std::string> asked;
  for (absl::string_view op : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    if (std::find(std::begin(kBenchOps), std::end(kBenchOps), op) == std::end(kBenchOps)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ops: unknown op \"", op, "\" (known: ", absl::StrJoin(kBenchOps, ","), ")"));
    }
    asked.emplace_back(op);
  }
  std::vector<std::string> ops;
  for (const char* op : kBenchOps) {
    if (std::find(asked.begin(), asked.end(), op) != asked.end()) ops.emplace_back(op);
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ops: no op given (known: ", absl::StrJoin(kBenchOps, ","), ")"));
  }
  return ops;
}

absl::StatusOr<int64_t> BucketBytes(double mib) {
  const double bytes = mib * 1048576.0;
  if (!(bytes >= 1) || mib > static_cast<double>(kMaxBucketMib)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--bucket-mib must be at least one byte (1/1048576) and at most ", kMaxBucketMib));
  }
  return static_cast<int64_t>(bytes);
}

BenchMachine DescribeMachine(const Session& session) {
  BenchMachine machine;
  machine.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) machine.affinity_cores = CPU_COUNT(&set);
  machine.ranks = session.size();
  machine.backend = std::string(session.data().backend());
  machine.device = session.device.ToString();
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  // The first line, its runs of blanks as one space: "MPICH Version: 4.0.2", "Open MPI v5.0.3".
  const std::string text(library, static_cast<size_t>(std::max(0, length)));
  machine.mpi_library = absl::StrJoin(
      absl::StrSplit(text.substr(0, text.find('\n')), absl::ByAnyChar(" \t"), absl::SkipEmpty()),
      " ");
  machine.version = Version();
  return machine;
}

int RunBench(const BenchArgs& args) {
  // Arguments first, the same on every rank: a bad one is exit 2 before MPI starts.
  absl::StatusOr<std::vector<std::string>> ops = ParseOps(args.ops);
  absl::StatusOr<int64_t> bucket_bytes = BucketBytes(args.bucket_mib);
  for (const absl::Status& s : {ops.status(), bucket_bytes.status()}) {
    if (!s.ok()) return ReportError("bench", s, LauncherRank());
  }
  absl::StatusOr<Session> session = StartSession("cpu", TimeoutFrom(args.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut("bench", session.status());
    return ReportError("bench", session.status(), LauncherRank());
  }
  const int rank = session->rank();
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("bench", status);
    return ReportError("bench", status, rank);
  };
  absl::StatusOr<BenchWorkload> workload =
      MakeBenchWorkload(args.workload, args.tensors, args.inputs == "arena");
  absl::Status status = AgreeUnlessTimedOut(session->world(), workload.status());
  if (!status.ok()) return fail(status);
  const BenchSettings settings{*bucket_bytes, args.warmup, args.iters, args.inputs == "arena"};
  absl::StatusOr<std::unique_ptr<BenchRunner>> runner =
      BenchRunner::Create(*workload, session->data(), settings);
  status = AgreeUnlessTimedOut(session->world(), runner.status());
  if (!status.ok()) return fail(status);

  std::vector<BenchRow> rows;
  for (const std::string& op : *ops) {
    absl::StatusOr<BenchRow> row = op == "gather"              ? (*runner)->Gather(false)
                                   : op == "gather_r0_off"     ? (*runner)->Gather(true)
                                   : op == "broadcast"         ? (*runner)->Broadcast()
                                   : op == "distribute"        ? (*runner)->Distribute()
                                   : op == "gather_partial"    ? (*runner)->GatherPartial()
                                   : op == "gather_planned"    ? (*runner)->GatherPlanned(false)
                                   : op == "broadcast_planned" ? (*runner)->BroadcastPlanned(false)
                                   : op == "distribute_planned"
                                       ? (*runner)->DistributePlanned(false)
                                   : op == "gather_bound"    ? (*runner)->GatherPlanned(true)
                                   : op == "broadcast_bound" ? (*runner)->BroadcastPlanned(true)
                                                             : (*runner)->DistributePlanned(true);
    if (!row.ok()) return fail(row.status());
    rows.push_back(*std::move(row));
  }
  const BenchMachine machine = DescribeMachine(*session);
  if (rank == 0) {
    if (args.json) {
      std::cout << JsonText(BenchJson(*workload, machine, settings, rows), 2) << "\n";
    } else {
      PrintBenchText(std::cout, *workload, machine, settings, rows);
    }
  }
  int64_t wrong = 0;
  for (const BenchRow& row : rows) wrong += row.wrong + row.flat_wrong;
  if (wrong != 0) {
    return fail(absl::DataLossError(
        absl::StrCat(wrong,
                     " bytes of the results differ from the source (the #wrong column; a flat "
                     "baseline's are listed under the table)")));
  }
  return kExitOk;
}
#endif  // SDRT_CLI_HAVE_MPI

}  // namespace

void AddBenchCommand(CLI::App& app, int* exit_code) {
  const char* what =
      "time GatherStateDict, BroadcastStateDict and DistributeStateDict against flat MPI "
      "collectives of the same bytes (run under mpiexec; nccl-tests' columns)";
#if SDRT_CLI_HAVE_MPI
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", what);
  cmd->add_option("--workload", args->workload,
                  "llama (291 Llama-3-8B tensors / 8, bf16, 239 MiB), small (10,000 f32 "
                  "tensors, 20.8 MiB), tiny (small's 10,000 names, 8 f32 each: the per-tensor "
                  "cost alone), minilm (scripts/fetch-model.sh's file), or a "
                  "safetensors file or Hugging Face folder (write ./llama for a file of that "
                  "name); every tensor Shard(0) over all ranks")
      ->capture_default_str();
  cmd->add_option("--ops", args->ops,
                  "comma-separated rows: gather, gather_r0_off, broadcast, "
                  "distribute, gather_partial (every tensor Partial(max) on every rank), "
                  "gather_planned, broadcast_planned, distribute_planned (a reshard plan made "
                  "once, executed per call into preallocated DTensors), gather_bound, "
                  "broadcast_bound, distribute_bound (the same plan bound to both sides once, "
                  "BindReshard, executed per call); the last seven not in the default")
      ->capture_default_str();
  cmd->add_option("--bucket-mib", args->bucket_mib, "sdrt's bucket size, MiB (fractions allowed)")
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "timed runs per row")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed runs before them")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->add_option("--inputs", args->inputs,
                  "tensors: each input tensor its own allocation (as a framework's separately "
                  "allocated parameters are); arena: a synthetic workload's tensors and every "
                  "rank's pieces are views of one allocation per rank, on 2 MiB pages like the "
                  "flat baseline's buffer (a flat parameter buffer)")
      ->check(CLI::IsMember({"tensors", "arena"}))
      ->capture_default_str();
  cmd->add_option("--tensors", args->tensors,
                  "keep only the workload's first T tensors (0: all); the digest is then of "
                  "those (for quick runs and tests)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("--json", args->json,
                "print one JSON list (rank 0), an object per row: workload, op, ratio "
                "(sdrt / flat) and every column");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->footer(
      "Time is the slowest rank's, in ms: the median over the timed runs and [min..max]. "
      "flat: one MPI_Allgather(v) / MPI_Bcast of all the bytes in one warm buffer "
      "(distribute: memcpy); fresh: the same into a new, untouched buffer. --timeout bounds "
      "sdrt's collectives, not the flat MPI calls. Exit 1 when any byte is wrong.");
  cmd->callback([args, exit_code] { *exit_code = RunBench(*args); });
#else
  CLI::App* cmd =
      app.add_subcommand("bench", absl::StrCat(what, "; needs MPI, which this build lacks"));
  cmd->allow_extras();
  cmd->callback([exit_code] {
    *exit_code = ReportError(
        "bench", absl::FailedPreconditionError("needs MPI: this sdrt was built without it"), 0);
  });
#endif
}

}  // namespace sdrt::cli
