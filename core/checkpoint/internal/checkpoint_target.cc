#include "sdrt/core/checkpoint/internal/checkpoint_target.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
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

// Removes trailing slashes (but keeps "/").
std::string StripTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

absl::Status CheckIndexWritable(const ShardedCheckpointIndex& index, const std::string& source_name,
                                const std::string& out_dir) {
  const std::string& src = source_name;
  if (index.format_version != kShardedCheckpointFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(src, ": an index of format_version ",
                                                   index.format_version, "; this sdrt writes ",
                                                   kShardedCheckpointFormatVersion));
  }
  SDRT_ASSIGN_OR_RETURN(const std::string json, SerializeIndex(index));
  if (static_cast<int64_t>(json.size()) > kMaxJsonFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": its index.json would take ", json.size(), " bytes, over the ",
                     kMaxJsonFileBytes, " the reader accepts (metadata or names too large)"));
  }
  const absl::StatusOr<ShardedCheckpointIndex> readable =
      ParseIndex(json, std::string(kShardedCheckpointIndexName), out_dir);
  if (!readable.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": cannot be written as a sharded checkpoint that sdrt could read back: ",
                     readable.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointTarget> PrepareCheckpointTarget(const std::string& out_dir,
                                                         bool overwrite) {
  CheckpointTarget where;
  where.target = StripTrailingSlashes(out_dir);
  const fs::path target_path(where.target);
  where.base = target_path.filename().string();
  if (where.base.empty() || where.base == "." || where.base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteShardedCheckpoint: \"", out_dir, "\" does not name a folder to create"));
  }
  where.parent = target_path.parent_path().string();
  if (where.parent.empty()) where.parent = ".";
  const std::string& target = where.target;
  struct stat st;
  if (lstat(target.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::AlreadyExistsError(
          absl::StrCat(target, ": exists and is not a folder; refusing to replace it"));
    }
    SDRT_ASSIGN_OR_RETURN(const bool empty, IsEmptyDir(target));
    if (empty) return where;
    SDRT_RETURN_IF_ERROR(CheckIsShardedCheckpoint(target));
    if (!overwrite) {
      return absl::AlreadyExistsError(
          absl::StrCat(target,
                       ": a sharded checkpoint is already there; replace it with "
                       "overwrite (--overwrite in the sdrt commands)"));
    }
    where.exchange = true;
  } else if (errno != ENOENT) {
    return IoError(errno, "lstat", target);
  }
  return where;
}

}  // namespace sdrt::internal
