// The steps of `sdrt demo` (demo_steps.h).
#include "sdrt/tools/sdrt/internal/demo_steps.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::cli {
namespace {

// The built-in checkpoint's scale: tiny-llama at twice its size.
constexpr double kDemoScale = 2.0;

// `value` as a flag's text that parses back to the same double (StrCat keeps 6 digits:
// --bucket-mib 1048576 would reach the children as 1.04858e+06, out of range).
std::string Exact(double value) { return absl::StrFormat("%.17g", value); }

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

}  // namespace

std::string DemoCacheDir(const std::string& cache_dir) {
  if (!cache_dir.empty()) return cache_dir;
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

absl::StatusOr<std::string> DefaultCheckpoint(const std::string& cache) {
  const std::string path = absl::StrCat(cache, "/tiny-llama-x2.safetensors");
  if (SafetensorsFile::Open(path).ok()) return path;
  SDRT_ASSIGN_OR_RETURN(ArchConfig config, ScaledArch("tiny-llama", kDemoScale));
  SDRT_ASSIGN_OR_RETURN(const auto tensors, MakeSyntheticStateDict(config, DType::kFloat32, 0));
  SDRT_RETURN_IF_ERROR(WriteSafetensors(path, tensors, SyntheticMetadata(config, kDemoScale, 0)));
  return path;
}

absl::Status RunPlan(const DemoSettings& settings, const std::string& file, const std::string& work,
                     const std::string& plan_name, const std::string& mesh_text,
                     std::vector<DemoRow>& rows) {
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
      RunUnderMpi(settings.ranks, absl::StrCat("gather ", Quote(dir), " ", Quote(out),
                                               " --bucket-mib ", Exact(settings.bucket_mib),
                                               " --timeout ", Exact(settings.timeout_seconds))));
  const absl::Status same = SameCheckpoint(file, out);
  if (!same.ok()) ReportError("demo", same, /*rank=*/0);  // reported in the table too
  rows.push_back({plan_name, mesh_text, "gather", gather["bytes"].get<int64_t>(),
                  gather["gather_seconds"].get<double>(), gather["collectives"].get<int64_t>(),
                  same.ok()});

  SDRT_ASSIGN_OR_RETURN(
      nlohmann::json load,
      RunUnderMpi(settings.ranks, absl::StrCat("load ", Quote(file), " --mesh ", mesh_text,
                                               " --plan ", plan_name, " --verify ", Quote(dir),
                                               " --bucket-mib ", Exact(settings.bucket_mib),
                                               " --timeout ", Exact(settings.timeout_seconds))));
  rows.push_back({plan_name, mesh_text, "load", load["bytes"].get<int64_t>(),
                  load["seconds"].get<double>(), load["collectives"].get<int64_t>(),
                  load["bit_exact"].get<bool>()});
  return absl::OkStatus();
}

}  // namespace sdrt::cli
