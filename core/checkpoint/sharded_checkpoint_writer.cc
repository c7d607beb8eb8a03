// Writing sharded checkpoints: everything that can be refused is refused first, then one
// rank file at a time is cut from the source (a view or DistributeTensor's copy) into an
// AtomicFolder (core/io/atomic_file.h) that is moved into place at the end, so a reader
// sees the old checkpoint or the new one, never a part. The format:
// core/checkpoint/sharded_checkpoint.h.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;

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

// Whether the existing folder `target` is exactly what this writer makes, so that replacing
// it loses nothing of the user's: an index.json that ReadShardedCheckpointIndex accepts, the
// rank files it names, and nothing else, each a regular file (no links, folders or other
// entries). AlreadyExists naming the first entry or rule that does not fit otherwise.
absl::Status CheckIsShardedCheckpoint(const std::string& target) {
  const auto refuse = [&](absl::string_view why) {
    return absl::AlreadyExistsError(
        absl::StrCat(target, ": exists and is not a sharded checkpoint written by sdrt (", why,
                     "); refusing to replace it"));
  };
  std::vector<std::string> names;
  DIR* d = opendir(target.c_str());
  if (d == nullptr) return IoError(errno, "opendir", target);
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    struct stat st;
    const std::string path = absl::StrCat(target, "/", name);
    if (lstat(path.c_str(), &st) != 0) return IoError(errno, "lstat", path);
    if (!S_ISREG(st.st_mode)) {
      return refuse(absl::StrCat("it holds \"", absl::CHexEscape(name), "\", not a regular file"));
    }
  }
  if (!std::binary_search(names.begin(), names.end(), std::string(kShardedCheckpointIndexName))) {
    return refuse(absl::StrCat("no ", kShardedCheckpointIndexName));
  }
  ReadShardedCheckpointOptions read_options;
  read_options.check_rank_files = false;
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(target, read_options);
  if (!index.ok()) return refuse(index.status().message());
  std::vector<std::string> expected = index->files;
  expected.emplace_back(kShardedCheckpointIndexName);
  std::sort(expected.begin(), expected.end());
  for (const std::string& name : names) {
    if (!std::binary_search(expected.begin(), expected.end(), name)) {
      return refuse(absl::StrCat("it holds \"", absl::CHexEscape(name), "\", which ",
                                 kShardedCheckpointIndexName, " does not name"));
    }
  }
  return absl::OkStatus();
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

// Removes trailing slashes (but keeps "/").
std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const SafetensorsFile& source, std::shared_ptr<const DeviceMesh> mesh, const ShardingPlan& plan,
    const std::string& out_dir, const WriteShardedCheckpointOptions& options) {
  return WriteShardedCheckpoint(CheckpointSource::FromFile(source, options.source_name),
                                std::move(mesh), plan, out_dir, options);
}

absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const CheckpointSource& source, std::shared_ptr<const DeviceMesh> mesh,
    const ShardingPlan& plan, const std::string& out_dir,
    const WriteShardedCheckpointOptions& options) {
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
  for (const CheckpointSourceTensor& e : source.tensors()) {
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
    if (absl::Status cut =
            CheckShardingCutsWholeBytes(e.name, e.dtype, e.shape, *mesh, t.placements);
        !cut.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": ", cut.message()));
    }
    absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, *mesh, t.placements, 0);
    if (!local.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": tensor ", e.name, " with ",
                                                     PlacementsToString(t.placements), ": ",
                                                     local.status().message()));
    }
    index.tensors.push_back(std::move(t));
  }

  // What is written must be what the reader accepts (a name it refuses, metadata that
  // makes index.json larger than it reads): checked on the index text before anything is
  // written, so a refused checkpoint is never left for `--overwrite` to refuse in turn.
  {
    SDRT_ASSIGN_OR_RETURN(const std::string json, internal::SerializeIndex(index));
    if (static_cast<int64_t>(json.size()) > kMaxJsonFileBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(src, ": its index.json would take ", json.size(), " bytes, over the ",
                       kMaxJsonFileBytes, " the reader accepts (metadata or names too large)"));
    }
    const absl::StatusOr<ShardedCheckpointIndex> readable =
        internal::ParseIndex(json, std::string(kShardedCheckpointIndexName), out_dir);
    if (!readable.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          src, ": cannot be written as a sharded checkpoint that sdrt could read back: ",
          readable.status().message()));
    }
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
    if (empty) {
      replace = Replace::kEmpty;
    } else if (const absl::Status ours = CheckIsShardedCheckpoint(target); !ours.ok()) {
      return ours;
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

  SDRT_ASSIGN_OR_RETURN(AtomicFolder tmp, AtomicFolder::Create(parent, base));

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
                                          internal::RankMetadata(*mesh, r)));
  }
  SDRT_ASSIGN_OR_RETURN(const std::string json, internal::SerializeIndex(index));
  SDRT_RETURN_IF_ERROR(
      WriteNewFile(absl::StrCat(tmp.path(), "/", kShardedCheckpointIndexName), json));
  SDRT_RETURN_IF_ERROR(tmp.Install(parent, target, replace == Replace::kExchange));
  return index;
}

}  // namespace sdrt
