#include "sdrt/tools/sdrt/internal/options.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {
namespace {

// A finite number in [min, max], checked before CLI11 converts it: NaN passes any range
// check (every comparison with it is false), so it is refused first. `what` ends the
// message: "--bucket-mib: must be a number in [1/16384, 1048576] (MiB), got 8796093022208".
CLI::Validator FiniteRange(double min, double max, const std::string& range_text,
                           const std::string& unit) {
  return CLI::Validator(
      [=](std::string& text) {
        double value = 0;
        if (ParseDecimal(text, &value) && std::isfinite(value) && value >= min && value <= max) {
          return std::string();
        }
        return absl::StrCat("must be a number in ", range_text, " (", unit, "), got ", text);
      },
      unit);
}

}  // namespace

int64_t SharedOptions::bucket_bytes() const {
  return std::max<int64_t>(64, static_cast<int64_t>(bucket_mib * 1048576.0));
}

ReadMode SharedOptions::read_mode() const {
  for (const ReadMode mode : {ReadMode::kAll, ReadMode::kRoot}) {
    if (read == ReadModeName(mode)) return mode;
  }
  return ReadMode::kAuto;
}

void AddSharedOptions(CLI::App* cmd, unsigned which, SharedOptions* options) {
  if (which & kMeshPlanOption) {
    cmd->add_option("--mesh", options->mesh, "device mesh shape over ranks 0..N-1: 4, 2x2, 2x2x2")
        ->required();
    cmd->add_option("--plan", options->plan,
                    "fsdp ([S(0)] on every mesh dim), hsdp ([R, S(0)], 2-D mesh), tp (by tensor "
                    "name), fsdp-tp (FSDP2 over TP, 2-D dp x tp mesh) or a PLAN.json file")
        ->required();
  }
  if (which & kMeshDimNamesOption) {
    cmd->add_option("--mesh-dim-names", options->mesh_dim_names,
                    "comma-separated mesh dim names recorded in the index, e.g. dp,tp");
  }
  if (which & kReadOption) {
    cmd->add_option("--read", options->read,
                    "who reads SRC: all (every rank its own bytes), root (rank 0, broadcast) or "
                    "auto (all when every rank sees the same files)")
        ->check(CLI::IsMember({"auto", "all", "root"}))
        ->capture_default_str();
    cmd->add_flag("--direct-io", options->direct_io,
                  "with --read all: read with O_DIRECT, bypassing the page cache (cold storage)");
    cmd->add_option("--readers", options->readers,
                    "with --read all: reader threads per rank reading at the same time (each into "
                    "its own staging buffer, or straight into the tensors); 0: chosen, 1 into "
                    "CPU tensors, up to 4 into CUDA ones")
        ->check(WholeNumber(0, 64))
        ->capture_default_str();
    cmd->add_flag("--read-once-per-node", options->read_once_per_node,
                  "with --read all: what every rank of a host keeps alike (replicated tensors) "
                  "is read by one of them and broadcast to the others there");
    cmd->add_flag("--map-results", options->map_results,
                  "with --read all: pieces that are one range of SRC (whole tensors, Shard(0) "
                  "pieces) become views of a private mapping of SRC instead of being read (no "
                  "copy; SRC must not be cut short or rewritten in place while they live)");
    // The checks that span two options, at the end of the command's parse.
    cmd->parse_complete_callback([options, cmd] {
      if (options->direct_io && options->read == "root") {
        throw CLI::ValidationError("--direct-io goes with --read all (or auto), not --read root");
      }
      if (cmd->get_option("--readers")->count() > 0 && options->read == "root") {
        throw CLI::ValidationError("--readers goes with --read all (or auto), not --read root");
      }
      if (options->read_once_per_node && options->read == "root") {
        throw CLI::ValidationError(
            "--read-once-per-node goes with --read all (or auto), not --read root");
      }
      if (options->map_results &&
          (options->read == "root" || options->direct_io || options->read_once_per_node)) {
        throw CLI::ValidationError(
            "--map-results goes with --read all (or auto), without --direct-io and "
            "--read-once-per-node");
      }
    });
  }
  if (which & kDeviceOption) {
    cmd->add_option("--device", options->device,
                    "where the tensors live: cpu, or cuda (each rank the GPU of its node-local "
                    "rank)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
  }
  if (which & kBucketMibOption) {
    cmd->add_option("--bucket-mib", options->bucket_mib,
                    "the most bytes one collective moves per rank, MiB (fractions allowed)")
        ->check(FiniteRange(1.0 / 16384, static_cast<double>(kMaxBucketMib),
                            absl::StrCat("[1/16384, ", kMaxBucketMib, "]"), "MiB"))
        ->capture_default_str();
  }
  if (which & kOverwriteOption) {
    cmd->add_flag("--overwrite", options->overwrite,
                  "replace an existing output when it is what this command writes (a "
                  "safetensors file, a Hugging Face folder, a sharded checkpoint), never "
                  "anything else");
  }
  if (which & kJsonOption) cmd->add_flag("--json", options->json, "print the results as JSON");
  if (which & kProgressOption) {
    cmd->add_flag("--progress", options->progress,
                  "progress lines on rank 0's stderr even when it is not a terminal (under "
                  "mpiexec it never is)");
  }
  if (which & kTimeoutOption) {
    cmd->add_option("--timeout", options->timeout_seconds,
                    "seconds any collective may wait for the other ranks before every live rank "
                    "gives up (exit 1, naming the ranks that did not arrive)")
        ->check(FiniteRange(0.001, kMaxTimeoutSeconds,
                            absl::StrCat("[0.001, ", kMaxTimeoutSeconds, "]"), "SECONDS"))
        ->capture_default_str();
  }
}

std::chrono::milliseconds TimeoutFrom(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

absl::StatusOr<MeshAndPlan> ParseMeshAndPlan(const SharedOptions& options) {
  if (ParallelLayout::IsDescription(options.plan)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--plan ", options.plan,
        " is a parallel layout description, which gives each tensor its own mesh: this "
        "command writes every tensor on --mesh's one mesh (fsdp, hsdp, tp, fsdp-tp or a "
        "PLAN.json file); sdrt load, inspect --layout, simulate and bench take descriptions"));
  }
  absl::StatusOr<DeviceMesh> shape_only = DeviceMesh::FromString(options.mesh);
  if (!shape_only.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh \"", options.mesh, "\": ", shape_only.status().message()));
  }
  std::vector<std::string> names;
  if (!options.mesh_dim_names.empty()) names = absl::StrSplit(options.mesh_dim_names, ',');
  if (std::find(names.begin(), names.end(), "") != names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh-dim-names \"", options.mesh_dim_names, "\": a dim's name is empty"));
  }
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(shape_only->shape(), {}, names);
  if (!mesh.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mesh ", options.mesh, " --mesh-dim-names ",
                                                   options.mesh_dim_names, ": ",
                                                   mesh.status().message()));
  }
  SDRT_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::FromSpec(options.plan));
  SDRT_RETURN_IF_ERROR(plan.CheckMesh(*mesh));
  return MeshAndPlan{std::make_shared<const DeviceMesh>(*std::move(mesh)), std::move(plan)};
}

absl::StatusOr<ParallelLayout> ParseParallelLayout(const std::string& mesh_spec,
                                                   const std::string& plan_spec) {
  int64_t world = 0;
  const bool digits =
      std::all_of(mesh_spec.begin(), mesh_spec.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!mesh_spec.empty() && (!digits || mesh_spec[0] == '0' || mesh_spec.size() > 9 ||
                             !absl::SimpleAtoi(mesh_spec, &world))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh \"", mesh_spec,
                     "\" with a parallel layout: the world size (one whole number >= 1); "
                     "the layout makes each tensor's own mesh"));
  }
  return ParallelLayout::Parse(plan_spec, world);
}

bool ParseDecimal(absl::string_view text, double* value) {
  size_t i = 0;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
  size_t digits = 0, points = 0;
  for (; i < text.size() && (absl::ascii_isdigit(text[i]) || text[i] == '.'); ++i) {
    (text[i] == '.' ? points : digits) += 1;
  }
  if (digits == 0 || points > 1) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    const size_t exponent = i;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i;
    if (i == exponent) return false;
  }
  return i == text.size() && absl::SimpleAtod(text, value);
}

CLI::Validator DecimalNumber() {
  return CLI::Validator(
      [](std::string& text) {
        double value = 0;
        return ParseDecimal(text, &value) ? std::string()
                                          : absl::StrCat("must be a decimal number, got ", text);
      },
      "NUMBER");
}

CLI::Validator WholeNumber(int64_t min, int64_t max) {
  return CLI::Validator(
      [=](std::string& text) {
        int64_t value = 0;
        const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
          return absl::ascii_isdigit(static_cast<unsigned char>(c));
        });
        if (digits && absl::SimpleAtoi(text, &value) && value >= min && value <= max) {
          return std::string();
        }
        return absl::StrCat("must be a whole number in [", min, ", ", max, "], got ", text);
      },
      "INT");
}

}  // namespace sdrt::cli
