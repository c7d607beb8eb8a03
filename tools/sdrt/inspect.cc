// `sdrt inspect FILE|DIR [--json]`: what a safetensors checkpoint or a sharded checkpoint
// folder holds.
#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json = false;
};

// Ranks shown as one column each; more are summarised as distinct shapes with counts.
constexpr int64_t kMaxRankColumns = 8;

std::string ShapeOf(const IntVector& shape) {
  return ShapeText(std::vector<int64_t>(shape.begin(), shape.end()));
}

int InspectShardedCheckpoint(const InspectArgs& args) {
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(args.path);
  if (!index.ok()) return ReportError("inspect", index.status(), /*rank=*/0);
  const DeviceMesh& mesh = *index->mesh;
  const int64_t world = index->world_size;
  // local_shapes[t][r], bytes[r].
  std::vector<std::vector<IntVector>> local_shapes;
  std::vector<int64_t> rank_bytes(static_cast<size_t>(world), 0);
  int64_t parameters = 0;
  int64_t bytes = 0;
  for (const ShardedCheckpointTensor& t : index->tensors) {
    std::vector<IntVector> shapes;
    for (int64_t r = 0; r < world; ++r) {
      absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, mesh, t.placements, r);
      if (!local.ok()) {  // validated by ReadShardedCheckpointIndex
        ReportError("inspect",
                    absl::InvalidArgumentError(absl::StrCat(args.path, ": tensor ", t.name, ": ",
                                                            local.status().message())),
                    /*rank=*/0);
        return kExitBadInput;
      }
      int64_t numel = 1;
      for (int64_t s : *local) numel *= s;
      rank_bytes[r] += numel * ElementSize(t.dtype);
      shapes.push_back(*std::move(local));
    }
    int64_t numel = 1;
    for (int64_t s : t.shape) numel *= s;
    parameters += numel;
    bytes += numel * ElementSize(t.dtype);
    local_shapes.push_back(std::move(shapes));
  }
  std::vector<int64_t> file_sizes;
  for (int64_t r = 0; r < world; ++r) {
    struct stat st;
    file_sizes.push_back(stat(index->RankFilePath(r).c_str(), &st) == 0 ? st.st_size : -1);
  }
  const std::string mesh_text = absl::StrJoin(mesh.shape(), "x");
  if (args.json) {
    nlohmann::ordered_json out;
    out["dir"] = args.path;
    out["format_version"] = index->format_version;
    out["world_size"] = world;
    out["mesh"] = {{"shape", std::vector<int64_t>(mesh.shape().begin(), mesh.shape().end())},
                   {"dim_names", mesh.dim_names()}};
    out["plan"] = index->plan;
    out["tensors"] = index->tensors.size();
    out["parameters"] = parameters;
    out["bytes"] = bytes;
    out["metadata"] = index->metadata;
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (int64_t r = 0; r < world; ++r) {
      files.push_back({{"rank", r},
                       {"file", index->files[r]},
                       {"file_size", file_sizes[r]},
                       {"bytes", rank_bytes[r]}});
    }
    out["files"] = std::move(files);
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (size_t i = 0; i < index->tensors.size(); ++i) {
      const ShardedCheckpointTensor& t = index->tensors[i];
      nlohmann::ordered_json shapes = nlohmann::ordered_json::array();
      for (const IntVector& s : local_shapes[i])
        shapes.push_back(std::vector<int64_t>(s.begin(), s.end()));
      entries.push_back({{"name", t.name},
                         {"dtype", std::string(SafetensorsCode(t.dtype))},
                         {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                         {"placements", PlacementsToString(t.placements)},
                         {"xxh64", FormatXxh64(t.xxh64)},
                         {"local_shapes", std::move(shapes)}});
    }
    out["entries"] = std::move(entries);
    std::cout << JsonText(out, 1) << "\n";
    return kExitOk;
  }
  std::vector<std::string> header = {"name", "dtype", "shape", "placements"};
  std::vector<bool> right = {false, false, false, false};
  const bool per_rank = world <= kMaxRankColumns;
  if (per_rank) {
    for (int64_t r = 0; r < world; ++r) {
      header.push_back(absl::StrCat("rank ", r));
      right.push_back(false);
    }
  } else {
    header.push_back("local shapes (x ranks)");
    right.push_back(false);
  }
  Table table(header, right);
  for (size_t i = 0; i < index->tensors.size(); ++i) {
    const ShardedCheckpointTensor& t = index->tensors[i];
    std::vector<std::string> row = {Printable(t.name), std::string(DTypeName(t.dtype)),
                                    ShapeOf(t.shape), PlacementsToString(t.placements)};
    if (per_rank) {
      for (const IntVector& s : local_shapes[i]) row.push_back(ShapeOf(s));
    } else {
      // Distinct shapes in first-seen order, with how many ranks hold each.
      std::vector<std::pair<IntVector, int64_t>> counts;
      for (const IntVector& s : local_shapes[i]) {
        auto it =
            std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == s; });
        if (it == counts.end()) {
          counts.emplace_back(s, 1);
        } else {
          ++it->second;
        }
      }
      row.push_back(absl::StrJoin(counts, ", ", [](std::string* out, const auto& c) {
        absl::StrAppend(out, ShapeOf(c.first), " x", c.second);
      }));
    }
    table.AddRow(std::move(row));
  }
  std::cout << Printable(args.path) << "\n"
            << "sharded checkpoint (format " << index->format_version << "): mesh " << mesh_text;
  if (!mesh.dim_names().empty()) {
    std::cout << " (" << Printable(absl::StrJoin(mesh.dim_names(), ", ")) << ")";
  }
  std::cout << ", world size " << world << ", plan " << Printable(index->plan) << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << index->tensors.size() << (index->tensors.size() == 1 ? " tensor, " : " tensors, ")
            << WithThousands(parameters) << " parameters, " << WithThousands(bytes) << " bytes ("
            << HumanBytes(bytes) << ") in full\n\n";
  Table files({"rank", "file", "local bytes", "file size"}, {true, false, true, true});
  for (int64_t r = 0; r < world; ++r) {
    files.AddRow({std::to_string(r), Printable(index->files[r]), WithThousands(rank_bytes[r]),
                  HumanBytes(file_sizes[r])});
  }
  files.Print(std::cout);
  if (index->metadata.empty()) {
    std::cout << "metadata: none\n";
  } else {
    std::cout << "metadata:\n";
    for (const auto& [key, value] : index->metadata) {
      constexpr size_t kMaxShown = 120;
      std::cout << "  " << Printable(key) << " = " << Printable(Utf8Prefix(value, kMaxShown))
                << (value.size() > kMaxShown ? "..." : "") << "\n";
    }
  }
  return kExitOk;
}

int RunInspect(const InspectArgs& args) {
  struct stat st;
  if (stat(args.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return InspectShardedCheckpoint(args);
  }
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(args.path);
  if (!file.ok()) {  // any file that cannot be read as safetensors is bad input
    ReportError("inspect", file.status(), /*rank=*/0);
    return kExitBadInput;
  }
  int64_t parameters = 0;
  int64_t bytes = 0;
  for (const SafetensorsEntry& e : file->entries()) {
    int64_t numel = 1;
    for (int64_t s : e.shape) numel *= s;
    parameters += numel;
    bytes += e.data_end - e.data_begin;
  }
  if (args.json) {
    nlohmann::ordered_json out;
    out["file"] = args.path;
    out["file_size"] = file->file_size();
    out["tensors"] = file->entries().size();
    out["parameters"] = parameters;
    out["bytes"] = bytes;
    out["metadata"] = file->metadata();
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const SafetensorsEntry& e : file->entries()) {
      entries.push_back({{"name", e.name},
                         {"dtype", std::string(SafetensorsCode(e.dtype))},
                         {"shape", std::vector<int64_t>(e.shape.begin(), e.shape.end())},
                         {"nbytes", e.data_end - e.data_begin},
                         {"data_offsets", {e.data_begin, e.data_end}}});
    }
    out["entries"] = std::move(entries);
    // Invalid UTF-8 (in a path, say) is replaced rather than thrown on.
    std::cout << JsonText(out, 1) << "\n";
    return kExitOk;
  }
  Table table({"name", "dtype", "shape", "bytes"}, {false, false, false, true});
  for (const SafetensorsEntry& e : file->entries()) {
    table.AddRow({Printable(e.name), std::string(DTypeName(e.dtype)),
                  "[" + absl::StrJoin(e.shape, ", ") + "]",
                  WithThousands(e.data_end - e.data_begin)});
  }
  std::cout << Printable(args.path) << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << file->entries().size() << (file->entries().size() == 1 ? " tensor, " : " tensors, ")
            << WithThousands(parameters) << " parameters, " << WithThousands(bytes) << " bytes ("
            << HumanBytes(bytes) << ") of data in a " << HumanBytes(file->file_size()) << " file\n";
  if (file->metadata().empty()) {
    std::cout << "metadata: none\n";
  } else {
    std::cout << "metadata:\n";
    for (const auto& [key, value] : file->metadata()) {
      // Long values (padding, embedded JSON) are cut so the table stays readable;
      // --json prints them whole.
      constexpr size_t kMaxShown = 120;
      std::cout << "  " << Printable(key) << " = " << Printable(Utf8Prefix(value, kMaxShown))
                << (value.size() > kMaxShown
                        ? "... (" + WithThousands(static_cast<int64_t>(value.size())) + " bytes)"
                        : "")
                << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void AddInspectCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "List the tensors of a safetensors file (name, dtype, shape, bytes, totals) or of a "
      "sharded checkpoint folder (also placements and each rank's local shape); the folder "
      "is validated: index.json and every rank file's header.");
  cmd->add_option("FILE|DIR", args->path, "safetensors file or sharded checkpoint folder")
      ->required();
  cmd->add_flag("--json", args->json, "print machine-readable JSON instead of a table");
  cmd->callback([args, exit_code] { *exit_code = RunInspect(*args); });
}

}  // namespace sdrt::cli
