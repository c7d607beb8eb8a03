// Sharded checkpoints: the writer cuts one rank at a time into a temporary folder and
// renames it into place; the reader validates index.json field by field and each rank
// file against it. See core/checkpoint/sharded_checkpoint.h for the format.
#include "sdrt/core/checkpoint/sharded_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr absl::string_view kMetaVersion = "sdrt.format_version";
constexpr absl::string_view kMetaRank = "sdrt.rank";
constexpr absl::string_view kMetaWorldSize = "sdrt.world_size";
constexpr absl::string_view kMetaMesh = "sdrt.mesh";
constexpr absl::string_view kMetaDimNames = "sdrt.mesh_dim_names";

std::string ShapeString(IntSpan shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}
std::string MeshShapeString(const DeviceMesh& mesh) { return absl::StrJoin(mesh.shape(), "x"); }

absl::Status IoError(int err, absl::string_view call, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(call, "(\"", path, "\")"));
}

absl::Status FsyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, "open", path);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return IoError(err, "fsync", path);
  return absl::OkStatus();
}

absl::Status WriteWholeFile(const std::string& path, absl::string_view bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return IoError(errno, "open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return IoError(err, "write", path);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int err = errno;
    close(fd);
    return IoError(err, "fsync", path);
  }
  if (close(fd) != 0) return IoError(errno, "close", path);
  return absl::OkStatus();
}

// A temporary folder removed (with everything in it) on destruction unless released.
class TempDir {
 public:
  TempDir() = default;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!path_.empty()) {
      std::error_code ignored;
      fs::remove_all(path_, ignored);
    }
  }

  // Creates `.<base>.tmp.<pid>.<tag>` in `parent`.
  absl::Status Create(const std::string& parent, const std::string& base) {
    static std::atomic<uint64_t> counter{0};
    for (int attempt = 0;; ++attempt) {
      const uint64_t tag =
          (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^
          static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
      std::string path = absl::StrCat(parent, "/.", base, ".tmp.", getpid(), ".", absl::Hex(tag));
      if (mkdir(path.c_str(), 0777) == 0) {
        path_ = std::move(path);
        return absl::OkStatus();
      }
      if (errno != EEXIST || attempt >= 100) return IoError(errno, "mkdir", path);
    }
  }
  const std::string& path() const { return path_; }
  void Release() { path_.clear(); }
  // After a RENAME_EXCHANGE the old checkpoint lives at path(): still removed.

 private:
  std::string path_;
};

// Whether `dir` holds no entries; errno's status when it cannot be listed.
absl::StatusOr<bool> IsEmptyDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return IoError(errno, "opendir", dir);
  bool empty = true;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  closedir(d);
  return empty;
}

// The local tensor of `rank`: a view of `full` when the piece is one contiguous slice of it
// (no copy), else DistributeTensor's copy.
absl::StatusOr<Tensor> CutLocal(const Tensor& full, const std::shared_ptr<const DeviceMesh>& mesh,
                                const std::vector<Placement>& placements, int64_t rank) {
  SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                        ComputeLocalShapeAndGlobalOffset(full.shape(), *mesh, placements, rank));
  if (info.is_slice) {
    Tensor view = full;
    for (int d = 0; d < full.dim(); ++d) {
      SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, info.global_offset[d], info.local_shape[d]));
    }
    if (view.is_contiguous()) return view;
  }
  SDRT_ASSIGN_OR_RETURN(DTensor piece, DistributeTensor(full, mesh, placements, rank));
  return piece.local();
}

std::map<std::string, std::string> RankMetadata(const DeviceMesh& mesh, int64_t rank) {
  std::map<std::string, std::string> meta;
  meta[std::string(kMetaVersion)] = absl::StrCat(kShardedCheckpointFormatVersion);
  meta[std::string(kMetaRank)] = absl::StrCat(rank);
  meta[std::string(kMetaWorldSize)] = absl::StrCat(mesh.num_ranks());
  meta[std::string(kMetaMesh)] = MeshShapeString(mesh);
  if (!mesh.dim_names().empty()) {
    meta[std::string(kMetaDimNames)] = absl::StrJoin(mesh.dim_names(), ",");
  }
  return meta;
}

Json IndexToJson(const ShardedCheckpointIndex& index) {
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
  return out;
}

// Removes trailing slashes (but keeps "/").
std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// --- index.json parsing ------------------------------------------------------------------

absl::Status Bad(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
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
  if (!CheckedNumel(t.shape).ok()) return Bad(named, "the shape's element count overflows int64");
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
                                     " of a tensor of shape ", ShapeString(t.shape)));
    }
  }
  absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, mesh, t.placements, 0);
  if (!local.ok()) return Bad(named, local.status().message());
  SDRT_ASSIGN_OR_RETURN(const std::string hash, GetString(value["xxh64"], named, "xxh64"));
  SDRT_ASSIGN_OR_RETURN(t.xxh64, ParseXxh64(hash, named));
  return t;
}

}  // namespace

std::string RankFileName(int64_t rank, int64_t world_size) {
  return absl::StrFormat("rank-%05d-of-%05d.safetensors", rank, world_size);
}

absl::StatusOr<uint64_t> TensorXxh64(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorXxh64: the tensor must be defined and on the CPU, got ",
                     tensor.defined() ? tensor.ToString() : "an undefined tensor"));
  }
  SDRT_ASSIGN_OR_RETURN(const Tensor contiguous, tensor.Contiguous());
  const void* data = contiguous.nbytes() > 0 ? contiguous.data_ptr() : "";
  return static_cast<uint64_t>(XXH64(data, static_cast<size_t>(contiguous.nbytes()), 0));
}

std::string FormatXxh64(uint64_t hash) { return absl::StrFormat("%016x", hash); }

std::string ShardedCheckpointIndex::RankFilePath(int64_t rank) const {
  return absl::StrCat(dir, "/", files[static_cast<size_t>(rank)]);
}

const ShardedCheckpointTensor* ShardedCheckpointIndex::Find(absl::string_view name) const {
  for (const ShardedCheckpointTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Map RankShards::ToStateDict() const {
  Map out;
  for (const auto& [name, dtensor] : tensors) out.Set(name, Value(dtensor));
  return out;
}

absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const SafetensorsFile& source, std::shared_ptr<const DeviceMesh> mesh, const ShardingPlan& plan,
    const std::string& out_dir, const WriteShardedCheckpointOptions& options) {
  const std::string& src = options.source_name;
  if (mesh == nullptr) return absl::InvalidArgumentError("WriteShardedCheckpoint: null mesh");
  for (int64_t i = 0; i < mesh->num_ranks(); ++i) {
    if (mesh->ranks()[static_cast<size_t>(i)] != i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WriteShardedCheckpoint: the mesh must be over ranks 0..N-1 in row-major order, got ",
          mesh->ToString()));
    }
  }
  if (mesh->num_ranks() > kMaxShardedCheckpointRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteShardedCheckpoint: the mesh ", mesh->ToString(), " has more than ",
                     kMaxShardedCheckpointRanks, " ranks (one file each)"));
  }
  SDRT_RETURN_IF_ERROR(plan.CheckMesh(*mesh));

  // Everything that can be refused is refused before anything is written.
  ShardedCheckpointIndex index;
  index.world_size = mesh->num_ranks();
  index.mesh = mesh;
  index.plan = plan.name();
  index.metadata = source.metadata();
  for (int64_t r = 0; r < index.world_size; ++r) {
    index.files.push_back(RankFileName(r, index.world_size));
  }
  for (const SafetensorsEntry& e : source.entries()) {
    ShardedCheckpointTensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    absl::StatusOr<std::vector<Placement>> placements = plan.PlacementsFor(e.name, e.shape, *mesh);
    if (!placements.ok()) {
      return absl::Status(placements.status().code(),
                          absl::StrCat(src, ": ", placements.status().message()));
    }
    t.placements = *std::move(placements);
    absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, *mesh, t.placements, 0);
    if (!local.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": tensor ", e.name, " with ",
                                                     PlacementsToString(t.placements), ": ",
                                                     local.status().message()));
    }
    index.tensors.push_back(std::move(t));
  }

  const std::string target = StripTrailingSlashes(out_dir);
  const fs::path target_path(target);
  const std::string base = target_path.filename().string();
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteShardedCheckpoint: \"", out_dir, "\" does not name a folder to create"));
  }
  std::string parent = target_path.parent_path().string();
  if (parent.empty()) parent = ".";
  index.dir = out_dir;

  enum class Replace { kNone, kEmpty, kExchange } replace = Replace::kNone;
  struct stat st;
  if (lstat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat(target, ": exists and is not a folder; refusing to replace it"));
    }
    SDRT_ASSIGN_OR_RETURN(const bool empty, IsEmptyDir(target));
    const std::string old_index = absl::StrCat(target, "/", kShardedCheckpointIndexName);
    if (empty) {
      replace = Replace::kEmpty;
    } else if (access(old_index.c_str(), F_OK) != 0) {
      return absl::AlreadyExistsError(
          absl::StrCat(target, ": exists, is not empty and is not a sharded checkpoint (no ",
                       kShardedCheckpointIndexName, "); refusing to replace it"));
    } else if (!options.overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat(target,
                       ": a sharded checkpoint is already there; replace it with "
                       "overwrite (sdrt shard --overwrite)"));
    } else {
      replace = Replace::kExchange;
    }
  } else if (errno != ENOENT) {
    return IoError(errno, "lstat", target);
  }

  TempDir tmp;
  SDRT_RETURN_IF_ERROR(tmp.Create(parent, base));

  // Hashes of the full tensors, then one rank file at a time.
  for (ShardedCheckpointTensor& t : index.tensors) {
    SDRT_ASSIGN_OR_RETURN(const Tensor full, source.Get(t.name));
    SDRT_ASSIGN_OR_RETURN(t.xxh64, TensorXxh64(full));
  }
  for (int64_t r = 0; r < index.world_size; ++r) {
    std::vector<std::pair<std::string, Tensor>> locals;
    locals.reserve(index.tensors.size());
    for (const ShardedCheckpointTensor& t : index.tensors) {
      SDRT_ASSIGN_OR_RETURN(const Tensor full, source.Get(t.name));
      if (NumShards(*mesh, t.placements) == 1) {
        locals.emplace_back(t.name, full);  // every rank holds the whole tensor
        continue;
      }
      absl::StatusOr<Tensor> local = CutLocal(full, mesh, t.placements, r);
      if (!local.ok()) {
        return absl::Status(
            local.status().code(),
            absl::StrCat(src, ": tensor ", t.name, " with ", PlacementsToString(t.placements),
                         " for rank ", r, ": ", local.status().message()));
      }
      locals.emplace_back(t.name, *std::move(local));
    }
    SDRT_RETURN_IF_ERROR(WriteSafetensors(absl::StrCat(tmp.path(), "/", index.files[r]), locals,
                                          RankMetadata(*mesh, r)));
  }
  std::string json;
  try {
    json = IndexToJson(index).dump(1) + "\n";
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat(target, ": cannot serialise the index: ", e.what()));
  }
  SDRT_RETURN_IF_ERROR(
      WriteWholeFile(absl::StrCat(tmp.path(), "/", kShardedCheckpointIndexName), json));
  SDRT_RETURN_IF_ERROR(FsyncPath(tmp.path()));

  // Into place.
  if (replace == Replace::kExchange) {
    if (renameat2(AT_FDCWD, tmp.path().c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno != EINVAL && errno != ENOSYS) return IoError(errno, "renameat2", target);
      // No RENAME_EXCHANGE here: move the old folder aside, the new one in, then drop it.
      TempDir aside;
      SDRT_RETURN_IF_ERROR(aside.Create(parent, base + ".old"));
      const std::string old = aside.path() + "/old";
      if (rename(target.c_str(), old.c_str()) != 0) return IoError(errno, "rename", target);
      if (rename(tmp.path().c_str(), target.c_str()) != 0) {
        const int err = errno;
        rename(old.c_str(), target.c_str());  // put the old one back
        return IoError(err, "rename", tmp.path());
      }
      tmp.Release();
    }
    // After the exchange tmp.path() holds the old checkpoint; ~TempDir removes it.
  } else {
    if (rename(tmp.path().c_str(), target.c_str()) != 0)
      return IoError(errno, "rename", tmp.path());
    tmp.Release();
  }
  SDRT_RETURN_IF_ERROR(FsyncPath(parent));
  return index;
}

absl::StatusOr<ShardedCheckpointIndex> ReadShardedCheckpointIndex(
    const std::string& dir, const ReadShardedCheckpointOptions& options) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": cannot open the sharded checkpoint folder: ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": not a folder (a sharded checkpoint is a folder)"));
  }
  const std::string path = absl::StrCat(dir, "/", kShardedCheckpointIndexName);
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": missing or unreadable (", std::strerror(errno), "); not a sharded checkpoint"));
  }
  std::stringstream text;
  text << in.rdbuf();
  Json doc;
  try {
    doc = Json::parse(text.str());
  } catch (const Json::exception& e) {
    return Bad(path, absl::StrCat("not valid JSON: ", e.what()));
  }
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
  if (version != kShardedCheckpointFormatVersion) {
    return Bad(path, absl::StrCat("format_version ", version, " is not the one this sdrt reads (",
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
    const std::string rank_path = index.RankFilePath(r);
    struct stat rank_st;
    if (stat(rank_path.c_str(), &rank_st) != 0) {
      return Bad(rank_path, absl::StrCat("rank file ", r, " of ", index.world_size, " is missing (",
                                         std::strerror(errno), ")"));
    }
    if (!S_ISREG(rank_st.st_mode)) {
      return Bad(rank_path, absl::StrCat("rank file ", r, " is not a regular file"));
    }
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

  if (options.check_rank_files) {
    for (int64_t r = 0; r < index.world_size; ++r) {
      absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(index.RankFilePath(r));
      if (!file.ok()) return absl::InvalidArgumentError(file.status().message());
      SDRT_RETURN_IF_ERROR(CheckRankFile(index, r, *file));
    }
  }
  return index;
}

absl::Status CheckRankFile(const ShardedCheckpointIndex& index, int64_t rank,
                           const SafetensorsFile& file) {
  const std::string path = index.RankFilePath(rank);
  const std::map<std::string, std::string> expected = RankMetadata(*index.mesh, rank);
  for (const auto& [key, value] : expected) {
    auto it = file.metadata().find(key);
    if (it == file.metadata().end()) {
      return Bad(path, absl::StrCat("__metadata__ lacks \"", key, "\" (expected \"", value, "\")"));
    }
    if (it->second != value) {
      return Bad(path, absl::StrCat("__metadata__ \"", key, "\" is \"", it->second,
                                    "\" but the index says \"", value, "\""));
    }
  }
  for (const ShardedCheckpointTensor& t : index.tensors) {
    const SafetensorsEntry* e = file.Find(t.name);
    if (e == nullptr) {
      return Bad(path, absl::StrCat("tensor ", t.name, " of the index is missing"));
    }
    if (e->dtype != t.dtype) {
      return Bad(path, absl::StrCat("tensor ", t.name, " is ", SafetensorsCode(e->dtype),
                                    " but the index says ", SafetensorsCode(t.dtype)));
    }
    SDRT_ASSIGN_OR_RETURN(const IntVector local,
                          ComputeLocalShape(t.shape, *index.mesh, t.placements, rank));
    if (e->shape != local) {
      return Bad(path, absl::StrCat("tensor ", t.name, " has shape ", ShapeString(e->shape),
                                    " but rank ", rank, " of global shape ", ShapeString(t.shape),
                                    " with ", PlacementsToString(t.placements), " on mesh ",
                                    MeshShapeString(*index.mesh), " holds ", ShapeString(local)));
    }
  }
  if (file.entries().size() != index.tensors.size()) {
    for (const SafetensorsEntry& e : file.entries()) {
      if (index.Find(e.name) == nullptr) {
        return Bad(path, absl::StrCat("tensor ", e.name, " is not in the index"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RankShards> LoadRankShards(const std::string& dir, int64_t rank) {
  ReadShardedCheckpointOptions options;
  options.check_rank_files = false;
  RankShards out;
  SDRT_ASSIGN_OR_RETURN(out.index, ReadShardedCheckpointIndex(dir, options));
  if (rank < 0 || rank >= out.index.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": rank ", rank, " is not in [0, ", out.index.world_size, ")"));
  }
  out.rank = rank;
  SDRT_ASSIGN_OR_RETURN(const SafetensorsFile file,
                        SafetensorsFile::Open(out.index.RankFilePath(rank)));
  SDRT_RETURN_IF_ERROR(CheckRankFile(out.index, rank, file));
  for (const ShardedCheckpointTensor& t : out.index.tensors) {
    SDRT_ASSIGN_OR_RETURN(Tensor local, file.Get(t.name));
    absl::StatusOr<DTensor> dtensor =
        DTensor::Make(std::move(local), out.index.mesh, t.placements, t.shape);
    if (!dtensor.ok()) {
      return Bad(out.index.RankFilePath(rank),
                 absl::StrCat("tensor ", t.name, ": ", dtensor.status().message()));
    }
    out.tensors.emplace_back(t.name, *std::move(dtensor));
  }
  return out;
}

}  // namespace sdrt
