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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::cli {
namespace {

// The most ranks demo starts: it runs every rank on this one machine.
constexpr int kMaxDemoRanks = 64;

struct DemoArgs {
  std::string checkpoint;
  int ranks = 4;
  int64_t bucket_mib = 256;
  std::string cache_dir;
  bool json = false;
  double timeout_seconds = kDefaultTimeoutSeconds;  // handed to gather and load
};

// sdrt's cache folder as scripts/fetch-model.sh finds it ($SDRT_CACHE_DIR, else
// $XDG_CACHE_HOME/sdrt, else $HOME/.cache/sdrt), then demo/ in it.
std::string CacheDir(const DemoArgs& args) {
  if (!args.cache_dir.empty()) return args.cache_dir;
  const char* sdrt = std::getenv("SDRT_CACHE_DIR");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string base = sdrt != nullptr && *sdrt != '\0' ? sdrt
                           : xdg != nullptr && *xdg != '\0' ? absl::StrCat(xdg, "/sdrt")
                           : home != nullptr                ? absl::StrCat(home, "/.cache/sdrt")
                                                            : "/tmp/sdrt";
  return absl::StrCat(base, "/demo");
}

absl::Status MakeDirs(const std::string& path) {
  std::string prefix;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || (path[i] == '/' && i > 0)) {
      prefix = path.substr(0, i);
      if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", prefix));
      }
    }
  }
  return absl::OkStatus();
}

// The built-in checkpoint: tiny-llama at twice its size (4 layers, hidden 128, vocab 512:
// about 5 MB), float32, seed 0; written once, atomically.
constexpr double kDemoScale = 2.0;
absl::StatusOr<std::string> DefaultCheckpoint(const std::string& cache) {
  const std::string path = absl::StrCat(cache, "/tiny-llama-x2.safetensors");
  if (SafetensorsFile::Open(path).ok()) return path;
  SDRT_ASSIGN_OR_RETURN(ArchConfig config, ScaledArch("tiny-llama", kDemoScale));
  SDRT_ASSIGN_OR_RETURN(const auto tensors, MakeSyntheticStateDict(config, DType::kFloat32, 0));
  SDRT_RETURN_IF_ERROR(WriteSafetensors(path, tensors, SyntheticMetadata(config, kDemoScale, 0)));
  return path;
}

// The tensors of `a` and `b` are the same (names, dtypes, shapes, bytes) and so is the
// metadata; else the first difference.
absl::Status SameCheckpoint(const std::string& a_path, const std::string& b_path) {
  SDRT_ASSIGN_OR_RETURN(CheckpointSource a, CheckpointSource::Open(a_path));
  SDRT_ASSIGN_OR_RETURN(SafetensorsFile b, SafetensorsFile::Open(b_path));
  if (a.tensors().size() != b.entries().size()) {
    return absl::DataLossError(absl::StrCat(b_path, " has ", b.entries().size(), " tensors, ",
                                            a_path, " ", a.tensors().size()));
  }
  if (a.metadata() != b.metadata()) {
    return absl::DataLossError(absl::StrCat(b_path, ": __metadata__ differs"));
  }
  for (const CheckpointSourceTensor& e : a.tensors()) {
    const SafetensorsEntry* f = b.Find(e.name);
    if (f == nullptr || f->dtype != e.dtype || f->shape != e.shape) {
      return absl::DataLossError(absl::StrCat(b_path, ": tensor ", e.name, " is missing or has ",
                                              "another dtype or shape"));
    }
    SDRT_ASSIGN_OR_RETURN(const Tensor x, a.Get(e.name));
    SDRT_ASSIGN_OR_RETURN(const Tensor y, b.Get(e.name));
    SDRT_ASSIGN_OR_RETURN(const uint64_t hx, TensorXxh64(x));
    SDRT_ASSIGN_OR_RETURN(const uint64_t hy, TensorXxh64(y));
    if (hx != hy) return absl::DataLossError(absl::StrCat(b_path, ": tensor ", e.name, " differs"));
  }
  return absl::OkStatus();
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A child's wait status in words: "exited with code 2", "killed by signal 9 (SIGKILL)".
std::string WaitStatusText(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    return absl::StrCat("killed by signal ", signal,
                        name != nullptr ? absl::StrCat(" (SIG", name, ")") : "");
  }
  return absl::StrCat("ended with wait status ", status);
}

// Runs `mpiexec -n N <this sdrt> <args> --json`, returns the JSON rank 0 printed. When the
// child fails (its ranks have printed why on stderr): InvalidArgument if it exited with 2
// (bad input), else Internal, the message naming the command and how it ended.
absl::StatusOr<nlohmann::json> RunUnderMpi(int ranks, const std::string& args) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return absl::InternalError("cannot find the sdrt executable (/proc/self/exe)");
  self[n] = '\0';
  const char* mpiexec = std::getenv("SDRT_MPIEXEC");
  const std::string command = absl::StrCat(mpiexec != nullptr ? mpiexec : "mpiexec", " -n ", ranks,
                                           " ", Quote(self), " ", args, " --json");
  // `exec`: the shell popen starts becomes mpiexec, so that pclose sees mpiexec's own end
  // (a signal, not the shell's exit code 128 + N).
  FILE* pipe = popen(absl::StrCat("exec ", command).c_str(), "r");
  if (pipe == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("popen ", command));
  std::string out;
  std::array<char, 4096> buffer;
  size_t got;
  while ((got = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), got);
  const int status = pclose(pipe);
  if (status == -1) return absl::ErrnoToStatus(errno, absl::StrCat("waiting for `", command, "`"));
  if (status != 0) {
    const std::string message = absl::StrCat("`", command, "` ", WaitStatusText(status));
    const bool bad_input = WIFEXITED(status) && WEXITSTATUS(status) == kExitBadInput;
    return bad_input ? absl::InvalidArgumentError(message) : absl::InternalError(message);
  }
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat("`", command, "` printed no JSON: ", out));
  }
  return j;
}

struct Row {
  std::string plan, mesh, step;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t collectives = 0;
  bool exact = false;
};

// One plan's shard -> gather -> load, its files in `work` (this run's own folder).
absl::Status RunPlan(const DemoArgs& args, const std::string& file, const std::string& work,
                     const std::string& plan_name, const std::string& mesh_text,
                     std::vector<Row>& rows) {
  SDRT_ASSIGN_OR_RETURN(CheckpointSource source, CheckpointSource::Open(file));
  SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::FromString(mesh_text));
  SDRT_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::Builtin(plan_name));
  const std::string dir = absl::StrCat(work, "/sharded-", plan_name);
  WriteShardedCheckpointOptions options;
  options.source_name = file;
  const double start = NowSeconds();
  SDRT_RETURN_IF_ERROR(WriteShardedCheckpoint(source,
                                              std::make_shared<const DeviceMesh>(std::move(mesh)),
                                              plan, dir, options)
                           .status());
  const int64_t bytes = source.total_bytes();
  rows.push_back({plan_name, mesh_text, "shard", bytes, NowSeconds() - start, 0, true});

  const std::string out = absl::StrCat(work, "/gathered-", plan_name, ".safetensors");
  SDRT_ASSIGN_OR_RETURN(
      nlohmann::json gather,
      RunUnderMpi(args.ranks, absl::StrCat("gather ", Quote(dir), " ", Quote(out), " --bucket-mib ",
                                           args.bucket_mib, " --timeout ", args.timeout_seconds)));
  const absl::Status same = SameCheckpoint(file, out);
  if (!same.ok()) ReportError("demo", same, /*rank=*/0);  // reported in the table too
  rows.push_back({plan_name, mesh_text, "gather", gather["bytes"].get<int64_t>(),
                  gather["gather_seconds"].get<double>(), gather["collectives"].get<int64_t>(),
                  same.ok()});

  SDRT_ASSIGN_OR_RETURN(
      nlohmann::json load,
      RunUnderMpi(args.ranks, absl::StrCat("load ", Quote(file), " --mesh ", mesh_text, " --plan ",
                                           plan_name, " --verify ", Quote(dir), " --bucket-mib ",
                                           args.bucket_mib, " --timeout ", args.timeout_seconds)));
  rows.push_back({plan_name, mesh_text, "load", load["bytes"].get<int64_t>(),
                  load["seconds"].get<double>(), load["collectives"].get<int64_t>(),
                  load["bit_exact"].get<bool>()});
  return absl::OkStatus();
}

int RunDemo(const DemoArgs& args) {
  const auto fail = [](const absl::Status& status) {
    return ReportError("demo", status, /*rank=*/0);
  };
  if (args.ranks < 1 || args.ranks > kMaxDemoRanks) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--ranks must be in [1, ", kMaxDemoRanks, "] (processes on this machine), got ",
        args.ranks)));
  }
  const std::string cache = CacheDir(args);
  absl::Status status = MakeDirs(cache);
  if (!status.ok()) return fail(status);
  // Absolute, so that a name starting with '-' reaches the children as a path, not a flag.
  std::string file = args.checkpoint.empty() ? "" : std::filesystem::absolute(args.checkpoint).string();
  if (file.empty()) {
    absl::StatusOr<std::string> made = DefaultCheckpoint(cache);
    if (!made.ok()) return fail(made.status());
    file = *made;
  }
  std::vector<std::pair<std::string, std::string>> plans = {{"fsdp", absl::StrCat(args.ranks)}};
  if (args.ranks % 2 == 0) {
    plans.emplace_back("fsdp-tp", absl::StrCat("2x", args.ranks / 2));
  } else if (!args.json) {
    WriteStderrLine("sdrt demo: fsdp-tp needs a 2 x N/2 mesh, so an even --ranks; skipped");
  }
  // This run's work files go to a folder of its own (removed at the end, on an interrupt,
  // or by a later run once this process is gone), so any number of demos share a cache.
  absl::StatusOr<internal::AtomicFolder> work = internal::AtomicFolder::Create(cache, "run");
  if (!work.ok()) return fail(work.status());
  std::vector<Row> rows;
  for (const auto& [plan, mesh] : plans) {
    status = RunPlan(args, file, work->path(), plan, mesh, rows);
    if (!status.ok()) return fail(status);
  }
  bool all_exact = true;
  for (const Row& r : rows) all_exact = all_exact && r.exact;
  if (args.json) {
    nlohmann::ordered_json out = {{"checkpoint", file}, {"ranks", args.ranks}, {"rows", {}}};
    for (const Row& r : rows) {
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
    for (const Row& r : rows) {
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
  cmd->add_option("--bucket-mib", args->bucket_mib, "bucket size, MiB")->capture_default_str();
  cmd->add_option("--cache-dir", args->cache_dir,
                  "work folder (default: demo/ in $SDRT_CACHE_DIR, else $XDG_CACHE_HOME/sdrt, else "
                  "~/.cache/sdrt)");
  cmd->add_flag("--json", args->json, "print the results as JSON");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->callback([args, exit_code] { *exit_code = RunDemo(*args); });
}

}  // namespace sdrt::cli
