#include "sdrt/core/checkpoint/internal/index_json.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/internal/strict_json.h"
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;

constexpr absl::string_view kMetaVersion = "sdrt.format_version";
constexpr absl::string_view kMetaRank = "sdrt.rank";
constexpr absl::string_view kMetaWorldSize = "sdrt.world_size";
constexpr absl::string_view kMetaMesh = "sdrt.mesh";
constexpr absl::string_view kMetaDimNames = "sdrt.mesh_dim_names";

absl::Status Bad(const std::string& where, absl::string_view what) {
  return CheckpointError(where, what);
}

// Checks that `object` has exactly the fields `names`.
absl::Status CheckFields(const Json& object, const std::vector<const char*>& names,
                         const std::string& where) {
  for (const char* name : names) {
    if (!object.contains(name)) return Bad(where, absl::StrCat("missing field \"", name, "\""));
  }
  for (auto it = object.begin(); it != object.end(); ++it) {
    bool known = false;
    for (const char* name : names) known = known || it.key() == name;
    if (!known) return Bad(where, absl::StrCat("unknown field \"", it.key(), "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> GetInt(const Json& value, const std::string& where, absl::string_view field,
                               int64_t min) {
  if (!value.is_number_integer()) {
    return Bad(where, absl::StrCat("\"", field, "\" must be an integer, got ", value.dump()));
  }
  // Unsigned values above INT64_MAX come back negative here, and fail the bound.
  const int64_t v =
      value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX ? -1 : value.get<int64_t>();
  if (v < min) {
    return Bad(where,
               absl::StrCat("\"", field, "\" must be at least ", min, ", got ", value.dump()));
  }
  return v;
}

absl::StatusOr<std::string> GetString(const Json& value, const std::string& where,
                                      absl::string_view field) {
  if (!value.is_string()) {
    return Bad(where, absl::StrCat("\"", field, "\" must be a string, got ", value.dump()));
  }
  return value.get<std::string>();
}

absl::StatusOr<IntVector> GetShape(const Json& value, const std::string& where,
                                   absl::string_view field, int64_t min) {
  if (!value.is_array()) {
    return Bad(where,
               absl::StrCat("\"", field, "\" must be an array of integers, got ", value.dump()));
  }
  IntVector out;
  for (const Json& item : value) {
    SDRT_ASSIGN_OR_RETURN(const int64_t v, GetInt(item, where, field, min));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<uint64_t> ParseXxh64(const std::string& text, const std::string& where) {
  bool ok = text.size() == 16;
  for (char c : text) ok = ok && (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f'));
  uint64_t value = 0;
  if (!ok || !absl::SimpleHexAtoi(text, &value)) {
    return Bad(where,
               absl::StrCat("\"xxh64\" must be 16 lower-case hex digits, got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<ShardedCheckpointTensor> ParseTensor(const Json& value, const DeviceMesh& mesh,
                                                    const std::string& where) {
  if (!value.is_object()) return Bad(where, "must be an object");
  SDRT_RETURN_IF_ERROR(
      CheckFields(value, {"name", "dtype", "shape", "placements", "xxh64"}, where));
  ShardedCheckpointTensor t;
  SDRT_ASSIGN_OR_RETURN(t.name, GetString(value["name"], where, "name"));
  if (t.name.empty() || t.name == kSafetensorsMetadataKey) {
    return Bad(where, absl::StrCat("invalid tensor name \"", t.name, "\""));
  }
  const std::string named = absl::StrCat(where, " (", t.name, ")");
  SDRT_ASSIGN_OR_RETURN(const std::string code, GetString(value["dtype"], named, "dtype"));
  absl::StatusOr<DType> dtype = DTypeFromSafetensors(code);
  if (!dtype.ok()) return Bad(named, dtype.status().message());
  t.dtype = *dtype;
  SDRT_ASSIGN_OR_RETURN(t.shape, GetShape(value["shape"], named, "shape", 0));
  if (t.shape.size() > static_cast<size_t>(kMaxCopyDims)) {  // what a reader can move
    return Bad(named, absl::StrCat(t.shape.size(), " dims; sdrt reads a sharded tensor of at most ",
                                   kMaxCopyDims));
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(t.shape);
  if (!numel.ok()) return Bad(named, "the shape's element count overflows int64");
  if (absl::Status bytes = BytesForElements(t.dtype, *numel).status(); !bytes.ok()) {
    return Bad(named, bytes.message());
  }
  SDRT_ASSIGN_OR_RETURN(const std::string placements,
                        GetString(value["placements"], named, "placements"));
  absl::StatusOr<std::vector<Placement>> parsed = ParsePlacements(placements);
  if (!parsed.ok()) return Bad(named, parsed.status().message());
  t.placements = *std::move(parsed);
  if (static_cast<int>(t.placements.size()) != mesh.ndim()) {
    return Bad(named, absl::StrCat("placements ", placements, " has ", t.placements.size(),
                                   " entries for the ", mesh.ndim(), "-D mesh ",
                                   MeshShapeString(mesh), " (one per mesh dim)"));
  }
  for (const Placement& p : t.placements) {
    if (p.is_partial()) {
      return Bad(named, absl::StrCat("placement ", p.ToString(),
                                     " is not allowed in a checkpoint (Partial)"));
    }
    if (p.is_shard_like() && p.dim() >= static_cast<int>(t.shape.size())) {
      return Bad(named, absl::StrCat("placement ", p.ToString(), " shards dim ", p.dim(),
                                     " of a tensor of shape ", ShapeToString(t.shape)));
    }
  }
  absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, mesh, t.placements, 0);
  if (!local.ok()) return Bad(named, local.status().message());
  if (absl::Status cut = CheckShardingCutsWholeBytes(t.name, t.dtype, t.shape, mesh, t.placements);
      !cut.ok()) {
    return Bad(where, cut.message());
  }
  SDRT_ASSIGN_OR_RETURN(const std::string hash, GetString(value["xxh64"], named, "xxh64"));
  SDRT_ASSIGN_OR_RETURN(t.xxh64, ParseXxh64(hash, named));
  return t;
}

}  // namespace

absl::Status CheckpointError(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::string MeshShapeString(const DeviceMesh& mesh) { return absl::StrJoin(mesh.shape(), "x"); }

absl::StatusOr<uint64_t> IndexXxh64(const ShardedCheckpointIndex& index) {
  SDRT_ASSIGN_OR_RETURN(const std::string json, SerializeIndex(index));
  return static_cast<uint64_t>(XXH64(json.data(), json.size(), 0));
}

std::map<std::string, std::string> RankMetadata(const ShardedCheckpointIndex& index, int64_t rank,
                                                uint64_t index_hash) {
  const DeviceMesh& mesh = *index.mesh;
  std::map<std::string, std::string> meta;
  meta[std::string(kMetaVersion)] = absl::StrCat(index.format_version);
  meta[std::string(kMetaRank)] = absl::StrCat(rank);
  meta[std::string(kMetaWorldSize)] = absl::StrCat(mesh.num_ranks());
  meta[std::string(kMetaMesh)] = MeshShapeString(mesh);
  if (!mesh.dim_names().empty()) {
    meta[std::string(kMetaDimNames)] = absl::StrJoin(mesh.dim_names(), ",");
  }
  if (index.format_version >= kPieceHashesFormatVersion) {
    meta[std::string(kMetaIndexHash)] = FormatXxh64(index_hash);
  }
  // An engine's layout goes with each rank file too: one read as a checkpoint of its own
  // is still refused on another layout.
  const auto engine_layout = index.metadata.find(kEngineLayoutMetadataKey);
  if (engine_layout != index.metadata.end()) {
    meta[kEngineLayoutMetadataKey] = engine_layout->second;
  }
  return meta;
}

std::string FormatPieceHashes(const std::vector<uint64_t>& hashes) {
  std::string text;
  text.reserve(hashes.size() * 16);
  for (uint64_t h : hashes) text += FormatXxh64(h);
  return text;
}

absl::StatusOr<std::vector<uint64_t>> ParsePieceHashes(absl::string_view text, size_t count,
                                                       const std::string& where) {
  if (text.size() != count * 16) {
    return Bad(where,
               absl::StrCat("__metadata__ \"", kMetaPieceHashes, "\" holds ", text.size(),
                            " characters, not 16 hex digits for each of the ", count, " tensors"));
  }
  std::vector<uint64_t> hashes;
  hashes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<uint64_t> h = ParseXxh64(std::string(text.substr(i * 16, 16)), where);
    if (!h.ok()) {
      return Bad(where, absl::StrCat("__metadata__ \"", kMetaPieceHashes, "\": hash ", i,
                                     " is not 16 lower-case hex digits"));
    }
    hashes.push_back(*h);
  }
  return hashes;
}

absl::StatusOr<std::string> SerializeIndex(const ShardedCheckpointIndex& index) {
  Json out;
  out["format"] = std::string(kShardedCheckpointFormat);
  out["format_version"] = index.format_version;
  out["world_size"] = index.world_size;
  out["mesh"] = {
      {"shape", std::vector<int64_t>(index.mesh->shape().begin(), index.mesh->shape().end())},
      {"dim_names", index.mesh->dim_names()}};
  out["plan"] = index.plan;
  out["files"] = index.files;
  out["metadata"] = index.metadata;
  Json tensors = Json::array();
  for (const ShardedCheckpointTensor& t : index.tensors) {
    tensors.push_back({{"name", t.name},
                       {"dtype", std::string(SafetensorsCode(t.dtype))},
                       {"shape", std::vector<int64_t>(t.shape.begin(), t.shape.end())},
                       {"placements", PlacementsToString(t.placements)},
                       {"xxh64", FormatXxh64(t.xxh64)}});
  }
  out["tensors"] = std::move(tensors);
  try {
    return out.dump(1) + "\n";
  } catch (const Json::exception& e) {  // a name or plan that is not UTF-8: bad input
    return absl::InvalidArgumentError(absl::StrCat("cannot write index.json: ", e.what()));
  }
}

absl::StatusOr<ShardedCheckpointIndex> ParseIndex(absl::string_view text, const std::string& path,
                                                  const std::string& dir) {
  absl::StatusOr<Json> parsed = ParseStrictJson(text);
  if (!parsed.ok()) return Bad(path, parsed.status().message());
  Json doc = *std::move(parsed);
  if (!doc.is_object()) return Bad(path, "the top level must be an object");
  SDRT_RETURN_IF_ERROR(CheckFields(
      doc,
      {"format", "format_version", "world_size", "mesh", "plan", "files", "metadata", "tensors"},
      path));
  SDRT_ASSIGN_OR_RETURN(const std::string format, GetString(doc["format"], path, "format"));
  if (format != kShardedCheckpointFormat) {
    return Bad(path, absl::StrCat("\"format\" is \"", format, "\", expected \"",
                                  kShardedCheckpointFormat, "\""));
  }
  ShardedCheckpointIndex index;
  index.dir = dir;
  SDRT_ASSIGN_OR_RETURN(const int64_t version,
                        GetInt(doc["format_version"], path, "format_version", 1));
  if (version > kShardedCheckpointFormatVersion) {
    return Bad(path, absl::StrCat("format_version ", version, " is not one this sdrt reads (1 to ",
                                  kShardedCheckpointFormatVersion, ")"));
  }
  index.format_version = static_cast<int>(version);
  SDRT_ASSIGN_OR_RETURN(index.world_size, GetInt(doc["world_size"], path, "world_size", 1));
  if (index.world_size > kMaxShardedCheckpointRanks) {
    return Bad(path, absl::StrCat("world_size ", index.world_size, " is above the limit of ",
                                  kMaxShardedCheckpointRanks, " ranks"));
  }

  const Json& mesh_json = doc["mesh"];
  if (!mesh_json.is_object()) return Bad(path, "\"mesh\" must be an object");
  SDRT_RETURN_IF_ERROR(CheckFields(mesh_json, {"shape", "dim_names"}, path + ": mesh"));
  SDRT_ASSIGN_OR_RETURN(const IntVector mesh_shape,
                        GetShape(mesh_json["shape"], path, "mesh.shape", 1));
  if (mesh_shape.empty()) return Bad(path, "\"mesh.shape\" must not be empty");
  std::vector<std::string> dim_names;
  if (!mesh_json["dim_names"].is_array()) return Bad(path, "\"mesh.dim_names\" must be an array");
  for (const Json& n : mesh_json["dim_names"]) {
    SDRT_ASSIGN_OR_RETURN(std::string name, GetString(n, path, "mesh.dim_names"));
    dim_names.push_back(std::move(name));
  }
  if (!dim_names.empty() && dim_names.size() != mesh_shape.size()) {
    return Bad(path, absl::StrCat("\"mesh.dim_names\" has ", dim_names.size(),
                                  " names for a mesh of ", mesh_shape.size(), " dims"));
  }
  int64_t product = 1;
  for (int64_t s : mesh_shape) {
    if (s > index.world_size || product > index.world_size / s) {
      product = -1;
      break;
    }
    product *= s;
  }
  if (product != index.world_size) {
    return Bad(path, absl::StrCat("the mesh ", absl::StrJoin(mesh_shape, "x"), " does not have ",
                                  "world_size ", index.world_size, " ranks"));
  }
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(mesh_shape, {}, dim_names);
  if (!mesh.ok()) return Bad(path, mesh.status().message());
  index.mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  SDRT_ASSIGN_OR_RETURN(index.plan, GetString(doc["plan"], path, "plan"));

  const Json& files = doc["files"];
  if (!files.is_array() || static_cast<int64_t>(files.size()) != index.world_size) {
    return Bad(path,
               absl::StrCat("\"files\" must list world_size = ", index.world_size, " rank files"));
  }
  for (int64_t r = 0; r < index.world_size; ++r) {
    SDRT_ASSIGN_OR_RETURN(std::string name, GetString(files[r], path, "files"));
    const std::string expected = RankFileName(r, index.world_size);
    if (name != expected) {
      return Bad(path,
                 absl::StrCat("\"files\"[", r, "] is \"", name, "\", expected \"", expected, "\""));
    }
    index.files.push_back(std::move(name));
  }

  const Json& metadata = doc["metadata"];
  if (!metadata.is_object()) return Bad(path, "\"metadata\" must be an object of strings");
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    SDRT_ASSIGN_OR_RETURN(index.metadata[it.key()],
                          GetString(it.value(), path, absl::StrCat("metadata.", it.key())));
  }

  const Json& tensors = doc["tensors"];
  if (!tensors.is_array()) return Bad(path, "\"tensors\" must be an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < tensors.size(); ++i) {
    SDRT_ASSIGN_OR_RETURN(
        ShardedCheckpointTensor t,
        ParseTensor(tensors[i], *index.mesh, absl::StrCat(path, ": tensors[", i, "]")));
    if (!seen.insert(t.name).second) {
      return Bad(path, absl::StrCat("tensors[", i, "]: duplicate tensor name ", t.name));
    }
    index.tensors.push_back(std::move(t));
  }

  return index;
}

}  // namespace sdrt::internal
