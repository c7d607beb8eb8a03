// `mpiexec -n N sdrt bench [--workload llama|small|tiny|minilm|FILE] [--ops gather,...]
// [--bucket-mib M] [--iters K] [--warmup W] [--tensors T] [--inputs tensors|arena]
// [--from LAYOUT] [--to LAYOUT] [--json]`: GatherStateDict, BroadcastStateDict and
// DistributeStateDict over MPI on the CPU, each against one flat MPI collective (or memcpy) of
// the same bytes in the same run, printed in nccl-tests' columns with sdrt / flat, sdrt / fresh
// and the collectives per call; every byte of every result is checked (#wrong). The workloads
// are internal/bench_workloads.h's, the rows internal/bench_ops.h's (--from and --to are the
// sync_layout row's layouts); bench/peer/pytorch_distributed_peer.py runs the same with
// PyTorch. Needs MPI: in a build without it the command says so (exit 2).
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"
#if SDRT_CLI_HAVE_MPI
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/bench_rows.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/bench_workloads.h"
#include "sdrt/tools/sdrt/internal/runner.h"
#endif

namespace sdrt::cli {
namespace {

#if SDRT_CLI_HAVE_MPI
struct BenchArgs {
  std::string workload = "llama";
  std::string ops = "gather,gather_r0_off,broadcast,distribute";
  int iters = 5;
  int warmup = 1;
  int64_t tensors = 0;
  std::string inputs = "tensors";
  std::string from = "fsdp:";
  std::string to;              // empty: vllm:tp=N on the N ranks
  bool layouts_given = false;  // --from or --to
  SharedOptions shared;        // --bucket-mib, --json, --timeout
};

// sync_layout's layouts into *settings: --from and --to (the engine's default vllm:tp=N),
// each spanning the run's `ranks` (ParallelLayout::Parse refuses another world size).
// InvalidArgument for a bad description or --from / --to without sync_layout in --ops.
absl::Status SetLayouts(const BenchArgs& args, const std::vector<std::string>& ops, int ranks,
                        BenchSettings* settings) {
  if (std::find(ops.begin(), ops.end(), "sync_layout") == ops.end()) {
    if (args.layouts_given) {
      return absl::InvalidArgumentError("--from and --to are sync_layout's: add it to --ops");
    }
    return absl::OkStatus();
  }
  settings->from_layout = args.from;
  settings->to_layout = args.to.empty() ? absl::StrCat("vllm:tp=", ranks) : args.to;
  for (const auto& [option, spec] :
       {std::pair<const char*, const std::string&>{"--from", settings->from_layout},
        {"--to", settings->to_layout}}) {
    const absl::StatusOr<ParallelLayout> layout = ParallelLayout::Parse(spec, ranks);
    if (!layout.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(option, ": ", layout.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Report> Bench(const BenchArgs& args, Runner& run) {
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> ops,
                        ParseBenchOps(args.ops));  // checked: OK
  // The raw MPI calls (timing, flat baselines) under --timeout too.
  StartRawMpiDeadline(args.shared.timeout_seconds);
  BenchWorkload workload;
  std::unique_ptr<BenchRunner> runner;
  BenchSettings settings;
  settings.bucket_bytes = args.shared.bucket_bytes();
  settings.warmup = args.warmup;
  settings.iterations = args.iters;
  settings.arena_inputs = args.inputs == "arena";
  // The same options and ranks on every rank: the same outcome.
  SDRT_RETURN_IF_ERROR(SetLayouts(args, ops, run.size(), &settings));
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(workload,
                          MakeBenchWorkload(args.workload, args.tensors, args.inputs == "arena"));
    return absl::OkStatus();
  }));
  // Ranks that see other bytes at one path (a per-rank folder) would wait for each other in
  // the flat baselines until their deadline: the workloads must agree first.
  SDRT_ASSIGN_OR_RETURN(
      const std::vector<std::string> seen,
      run.AllGather(absl::StrFormat("%d tensors, %d bytes, digest %016x", workload.full.size(),
                                    workload.bytes, workload.digest)));
  for (size_t r = 1; r < seen.size(); ++r) {
    if (seen[r] != seen[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("--workload ", args.workload, ": rank ", r, " sees ", seen[r],
                       ", rank 0 ", seen[0], "; every rank must see the same checkpoint"));
    }
  }
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(runner, BenchRunner::Create(workload, run.data(), settings));
    return absl::OkStatus();
  }));

  std::vector<BenchRow> rows;
  for (const std::string& op : ops) {
    absl::StatusOr<BenchRow> row = runner->Run(op);
    if (!row.ok()) return row.status();  // the rows agree on their errors (bench_ops.h)
    rows.push_back(*std::move(row));
  }
  const BenchMachine machine = DescribeBenchMachine(run.session());
  Report report;
  report.peak_memory = false;
  if (run.rank() == 0) {
    report.json = BenchJson(workload, machine, settings, rows);
    std::ostringstream text;
    PrintBenchText(text, workload, machine, settings, rows);
    report.text = text.str();
  }
  int64_t wrong = 0;
  for (const BenchRow& row : rows) wrong += row.wrong + row.flat_wrong;
  if (wrong != 0) {
    report.verdict = absl::DataLossError(
        absl::StrCat(wrong,
                     " bytes of the results differ from the source (the #wrong column; a flat "
                     "baseline's are listed under the table)"));
  }
  return report;
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
                  "BindReshard, executed per call), sync_mapped (a bound sync into a tp "
                  "engine's fused buffers through the vllm-llama map, against the same sync "
                  "unmapped; llama workload), sync_fp8 (the same into float8_e4m3fn linear "
                  "weights with per-tensor scales, against the bfloat16 sync; its wire bytes "
                  "printed), sync_regroup (the same buffers from Megatron-fused linear_qkv / "
                  "linear_fc1 by regroup rules, against sync_mapped), links (latency, pair, "
                  "nic and copy bandwidths by Communicator::Exchange, and the --cluster text "
                  "of sdrt simulate), sync_layout (a bound sync from --from into --to, against "
                  "one exchange of the same bytes per rank); the last twelve not in the "
                  "default")
      ->check(CLI::Validator(
          [](std::string& text) {
            const absl::StatusOr<std::vector<std::string>> ops = ParseBenchOps(text);
            return ops.ok() ? std::string() : std::string(ops.status().message());
          },
          "OPS"))
      ->capture_default_str();
  cmd->add_option("--iters", args->iters, "timed runs per row")
      ->check(WholeNumber(1, 1000000))
      ->capture_default_str();
  cmd->add_option("--warmup", args->warmup, "untimed runs before them")
      ->check(WholeNumber(0, 1000000))
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
      ->check(WholeNumber(0, int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_option("--from", args->from,
                  "sync_layout's source: the trainer's parallel layout over the run's ranks, "
                  "e.g. megatron:tp=2,pp=2,ep=2 (docs/LAYOUTS.md)")
      ->capture_default_str();
  cmd->add_option("--to", args->to,
                  "sync_layout's destination: the engine's parallel layout over the same "
                  "ranks, e.g. vllm:tp=2,dp=2,ep=4 (default vllm:tp=N on N ranks)");
  AddSharedOptions(cmd, kBucketMibOption | kJsonOption | kTimeoutOption, &args->shared);
  cmd->footer(
      "--json prints one list (rank 0), an object per row: workload, op, ratio (sdrt / flat) "
      "and every column. "
      "Time is the slowest rank's, in ms: the median over the timed runs and [min..max]. "
      "flat: one MPI_Allgather(v) / MPI_Bcast of all the bytes in one warm buffer "
      "(distribute: memcpy); fresh: the same into a new, untouched buffer. --timeout bounds "
      "every collective, the flat MPI calls too. Exit 1 when any byte is wrong.");
  cmd->callback([cmd, args, exit_code] {
    args->layouts_given = cmd->count("--from") + cmd->count("--to") > 0;
    *exit_code = RunOnRanks("bench", args->shared, [&](Runner& run) { return Bench(*args, run); });
  });
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
