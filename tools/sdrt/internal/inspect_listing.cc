// The listings of `sdrt inspect` (tools/sdrt/inspect.cc), one per kind of checkpoint: the
// table (or --json) of what it holds, printed on stdout.
#include "sdrt/tools/sdrt/internal/inspect_listing.h"

#include <sys/stat.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// Ranks shown as one column each; more are summarised as distinct shapes with counts.
constexpr int64_t kMaxRankColumns = 8;

std::string ShapeOf(const IntVector& shape) {
  return ShapeText(std::vector<int64_t>(shape.begin(), shape.end()));
}

// "<title>: none", or the title and one line per entry, long values cut (--json has them).
void PrintMetadata(absl::string_view title, const std::map<std::string, std::string>& metadata) {
  if (metadata.empty()) {
    std::cout << title << ": none\n";
    return;
  }
  std::cout << title << ":\n";
  for (const auto& [key, value] : metadata) {
    constexpr size_t kMaxShown = 120;
    std::cout << "  " << Printable(key) << " = " << Printable(Utf8Prefix(value, kMaxShown))
              << (value.size() > kMaxShown
                      ? "... (" + WithThousands(static_cast<int64_t>(value.size())) + " bytes)"
                      : "")
              << "\n";
  }
}

}  // namespace

absl::Status InspectShardedCheckpoint(const std::string& path, bool json) {
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(path);
  if (!index.ok()) return InputError(index.status());
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
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor ", t.name, ": ", local.status().message()));
      }
      int64_t numel = 1;
      for (int64_t s : *local) numel *= s;
      rank_bytes[r] += BytesForElements(t.dtype, numel).value_or(0);  // validated
      shapes.push_back(*std::move(local));
    }
    int64_t numel = 1;
    for (int64_t s : t.shape) numel *= s;
    parameters += numel;
    bytes += BytesForElements(t.dtype, numel).value_or(0);  // validated by the reader
    local_shapes.push_back(std::move(shapes));
  }
  std::vector<int64_t> file_sizes;
  for (int64_t r = 0; r < world; ++r) {
    struct stat st;
    file_sizes.push_back(stat(index->RankFilePath(r).c_str(), &st) == 0 ? st.st_size : -1);
  }
  const std::string mesh_text = absl::StrJoin(mesh.shape(), "x");
  if (json) {
    nlohmann::ordered_json out;
    out["dir"] = path;
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
    return absl::OkStatus();
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
  std::cout << Printable(path) << "\n"
            << "sharded checkpoint (format " << index->format_version << "): mesh " << mesh_text;
  if (!mesh.dim_names().empty()) {
    std::cout << " (" << Printable(absl::StrJoin(mesh.dim_names(), ", ")) << ")";
  }
  std::cout << ", world size " << world << ", plan " << Printable(index->plan) << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << Counted(static_cast<int64_t>(index->tensors.size()), "tensor") << ", "
            << Counted(parameters, "parameter") << ", " << Counted(bytes, "byte") << " ("
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
  return absl::OkStatus();
}

// A Hugging Face folder or a folder of safetensors files: the single file's listing with
// the file of each tensor, then one row per file.
absl::Status InspectFolderSource(const std::string& path, bool json) {
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
  if (!source.ok()) return InputError(source.status());
  const std::vector<CheckpointSourceFile>& files = source->files();
  int64_t parameters = 0;
  std::vector<int64_t> file_tensors(files.size(), 0);
  std::vector<int64_t> file_bytes(files.size(), 0);
  for (const CheckpointSourceTensor& t : source->tensors()) {
    int64_t numel = 1;
    for (int64_t s : t.shape) numel *= s;
    parameters += numel;
    ++file_tensors[static_cast<size_t>(t.file)];
    file_bytes[static_cast<size_t>(t.file)] += t.nbytes;
  }
  int64_t total_file_size = 0;
  for (const CheckpointSourceFile& f : files) total_file_size += f.size;
  const bool hf = source->kind() == CheckpointKind::kHfFolder;
  if (json) {
    nlohmann::ordered_json out;
    out["dir"] = path;
    out["kind"] = hf ? "huggingface" : "safetensors-folder";
    out["file_count"] = files.size();
    out["file_size"] = total_file_size;
    out["tensors"] = source->tensors().size();
    out["parameters"] = parameters;
    out["bytes"] = source->total_bytes();
    out["metadata"] = source->metadata();
    if (hf) out["index_metadata"] = source->index_metadata();
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (size_t i = 0; i < files.size(); ++i) {
      list.push_back({{"file", files[i].name},
                      {"file_size", files[i].size},
                      {"tensors", file_tensors[i]},
                      {"bytes", file_bytes[i]}});
    }
    out["files"] = std::move(list);
    nlohmann::ordered_json entries = nlohmann::ordered_json::array();
    for (const CheckpointSourceTensor& t : source->tensors()) {
      entries.push_back({{"name", t.name},
                         {"dtype", std::string(SafetensorsCode(t.dtype))},
                         {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                         {"nbytes", t.nbytes},
                         {"file", files[static_cast<size_t>(t.file)].name},
                         {"offset", t.offset}});
    }
    out["entries"] = std::move(entries);
    std::cout << out.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
    return absl::OkStatus();
  }
  Table table({"name", "dtype", "shape", "bytes", "file"}, {false, false, false, true, false});
  for (const CheckpointSourceTensor& t : source->tensors()) {
    table.AddRow({Printable(t.name), std::string(DTypeName(t.dtype)), ShapeOf(t.shape),
                  WithThousands(t.nbytes), Printable(files[static_cast<size_t>(t.file)].name)});
  }
  const size_t n = source->tensors().size();
  std::cout << Printable(path) << "\n"
            << (hf ? "Hugging Face checkpoint folder (model.safetensors.index.json), "
                   : "folder of safetensors files (no index), ")
            << files.size() << (files.size() == 1 ? " file" : " files") << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << Counted(n, "tensor") << ", " << Counted(parameters, "parameter") << ", "
            << Counted(source->total_bytes(), "byte") << " (" << HumanBytes(source->total_bytes())
            << ") of data in " << files.size() << (files.size() == 1 ? " file" : " files") << " of "
            << HumanBytes(total_file_size) << "\n\n";
  Table file_table({"file", "tensors", "bytes", "file size"}, {false, true, true, true});
  for (size_t i = 0; i < files.size(); ++i) {
    file_table.AddRow({Printable(files[i].name), std::to_string(file_tensors[i]),
                       WithThousands(file_bytes[i]), HumanBytes(files[i].size)});
  }
  file_table.Print(std::cout);
  PrintMetadata("metadata", source->metadata());
  if (hf) PrintMetadata("index metadata", source->index_metadata());
  return absl::OkStatus();
}

absl::Status InspectSafetensorsFile(const std::string& path, bool json) {
  SafetensorsFile::Options options;
  options.accept_header_only = true;  // listed, saying so
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
  if (!file.ok()) return InputError(file.status());
  const bool header_only = file->header_only();
  int64_t parameters = 0;
  int64_t bytes = 0;
  for (const SafetensorsEntry& e : file->entries()) {
    int64_t numel = 1;
    for (int64_t s : e.shape) numel *= s;
    parameters += numel;
    bytes += e.data_end - e.data_begin;
  }
  if (json) {
    nlohmann::ordered_json out;
    out["file"] = path;
    out["file_size"] = file->file_size();
    if (header_only) out["header_only"] = true;
    out["tensors"] = file->entries().size();
    out["parameters"] = parameters;
    out["bytes"] = bytes;  // of a header-only description: described, not in the file
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
    return absl::OkStatus();
  }
  Table table({"name", "dtype", "shape", "bytes"}, {false, false, false, true});
  for (const SafetensorsEntry& e : file->entries()) {
    table.AddRow({Printable(e.name), std::string(DTypeName(e.dtype)),
                  "[" + absl::StrJoin(e.shape, ", ") + "]",
                  WithThousands(e.data_end - e.data_begin)});
  }
  std::cout << Printable(path) << (header_only ? " (header only)" : "") << "\n\n";
  table.Print(std::cout);
  std::cout << "\n"
            << Counted(static_cast<int64_t>(file->entries().size()), "tensor") << ", "
            << Counted(parameters, "parameter") << ", " << Counted(bytes, "byte") << " ("
            << HumanBytes(bytes) << ") of data "
            << (header_only ? "described\nheader only: a " : "in a ")
            << HumanBytes(file->file_size())
            << (header_only ? " file made by `sdrt make --header-only`, holding no tensor bytes "
                              "(loads refuse it)\n"
                            : " file\n");
  PrintMetadata("metadata", file->metadata());
  return absl::OkStatus();
}

}  // namespace sdrt::cli
