// `sdrt demo [--checkpoint SRC] [--ranks 4]`: the whole path on one machine (SRC: a
// safetensors file, a Hugging Face folder or a folder of safetensors files). Without a
// checkpoint it generates the deterministic tiny-llama one into the cache folder (shared by
// concurrent runs: written atomically, the same bytes each time). Then, in a work folder of
// this run's own in the cache, for fsdp (mesh N) and fsdp-tp (mesh 2 x N/2) it shards the
// file, gathers it back under `mpiexec -n N sdrt gather` and compares the result with the
// source tensor by tensor, and loads it under `mpiexec -n N sdrt load --verify`, printing
// one summary table. A step that fails ends the demo with the step's exit class (docs/CLI.md,
// "Exit codes"): a child that exits with 2 (bad input) makes the demo exit 2, any other
// failure of a child (exit 1, a signal) exits 1.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/demo_steps.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// The most ranks demo starts: it runs every rank on this one machine.
constexpr int kMaxDemoRanks = 64;

struct DemoArgs {
  std::string checkpoint;
  int ranks = 4;
  std::string cache_dir;
  SharedOptions shared;  // --bucket-mib, --timeout (handed to gather and load), --json
};

int RunDemo(const DemoArgs& args) {
  const auto fail = [](const absl::Status& status) {
    return ReportError("demo", status, /*rank=*/0);
  };
  if (args.ranks < 1 || args.ranks > kMaxDemoRanks) {
    return fail(absl::InvalidArgumentError(absl::StrCat("--ranks must be in [1, ", kMaxDemoRanks,
                                                        "] (processes on this machine), got ",
                                                        args.ranks)));
  }
  const std::string cache = DemoCacheDir(args.cache_dir);
  absl::Status status = MakeDirs(cache);
  if (!status.ok()) return fail(status);
  // Absolute, so that a name starting with '-' reaches the children as a path, not a flag.
  std::string file =
      args.checkpoint.empty() ? "" : std::filesystem::absolute(args.checkpoint).string();
  if (file.empty()) {
    absl::StatusOr<std::string> made = DefaultCheckpoint(cache);
    if (!made.ok()) return fail(made.status());
    file = *made;
  }
  std::vector<std::pair<std::string, std::string>> plans = {{"fsdp", absl::StrCat(args.ranks)}};
  if (args.ranks % 2 == 0) {
    plans.emplace_back("fsdp-tp", absl::StrCat("2x", args.ranks / 2));
  } else if (!args.shared.json) {
    WriteStderrLine("sdrt demo: fsdp-tp needs a 2 x N/2 mesh, so an even --ranks; skipped");
  }
  // This run's work files go to a folder of its own (removed at the end, on an interrupt,
  // or by a later run once this process is gone), so any number of demos share a cache.
  absl::StatusOr<internal::AtomicFolder> work = internal::AtomicFolder::Create(cache, "run");
  if (!work.ok()) return fail(work.status());
  std::vector<DemoRow> rows;
  for (const auto& [plan, mesh] : plans) {
    status = RunPlan({args.ranks, args.shared.bucket_mib, args.shared.timeout_seconds}, file,
                     work->path(), plan, mesh, rows);
    if (!status.ok()) return fail(status);
  }
  bool all_exact = true;
  for (const DemoRow& r : rows) all_exact = all_exact && r.exact;
  if (args.shared.json) {
    nlohmann::ordered_json out = {{"checkpoint", file}, {"ranks", args.ranks}, {"rows", {}}};
    for (const DemoRow& r : rows) {
      out["rows"].push_back({{"plan", r.plan},
                             {"mesh", r.mesh},
                             {"step", r.step},
                             {"bytes", r.bytes},
                             {"seconds", r.seconds},
                             {"gbps", r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0},
                             {"collectives", r.collectives},
                             {"bit_exact", r.exact}});
    }
    out["bit_exact"] = all_exact;
    std::cout << JsonText(out, 2) << "\n";
  } else {
    std::cout << "sdrt demo: " << Printable(file) << " on " << args.ranks
              << " ranks (mpiexec), work files in " << Printable(work->path())
              << " (removed at the end)\n";
    Table table(
        {"plan", "mesh", "step", "ranks", "bytes", "time", "GB/s", "collectives", "bit-exact"},
        {false, false, false, true, true, true, true, true, false});
    for (const DemoRow& r : rows) {
      table.AddRow({r.plan, r.mesh, r.step, r.step == "shard" ? "1" : absl::StrCat(args.ranks),
                    HumanBytes(r.bytes), absl::StrFormat("%.3f s", r.seconds),
                    absl::StrFormat("%.2f", r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0),
                    r.step == "shard" ? "-" : absl::StrCat(r.collectives), r.exact ? "yes" : "NO"});
    }
    table.Print(std::cout);
  }
  return all_exact ? kExitOk : kExitRuntimeError;
}

}  // namespace

void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<DemoArgs>();
  CLI::App* cmd = app.add_subcommand(
      "demo", "shard -> gather -> load round trips under mpiexec, with a summary table");
  cmd->add_option("--checkpoint", args->checkpoint,
                  "checkpoint to use: a safetensors file, a Hugging Face folder or a folder of "
                  "safetensors files (default: generate tiny-llama in the cache)");
  cmd->add_option("--ranks", args->ranks, "ranks mpiexec starts")->capture_default_str();
  cmd->add_option("--cache-dir", args->cache_dir,
                  "work folder (default: demo/ in $SDRT_CACHE_DIR, else $XDG_CACHE_HOME/sdrt, else "
                  "~/.cache/sdrt)");
  AddSharedOptions(cmd, kBucketMibOption | kJsonOption | kTimeoutOption, &args->shared);
  cmd->callback([args, exit_code] { *exit_code = RunDemo(*args); });
}

}  // namespace sdrt::cli
