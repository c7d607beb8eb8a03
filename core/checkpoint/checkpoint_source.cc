// CheckpointSource: the kinds of checkpoint a path can be, the validation of multi-file
// folders and the tensor list of a sharded folder (checkpoint_source.h).
#include "sdrt/core/checkpoint/checkpoint_source.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/hf_folder.h"
#include "sdrt/core/checkpoint/internal/hf_index.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kSuffix = ".safetensors";

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 || errno != ENOENT;
}

// "rank-00000-of-00002.safetensors" and the like (five or more digits each).
bool IsRankFileName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "rank-") || !absl::ConsumeSuffix(&name, kSuffix)) return false;
  const size_t of = name.find("-of-");
  if (of == absl::string_view::npos || of < 5 || name.size() - of - 4 < 5) return false;
  const std::string digits = absl::StrCat(name.substr(0, of), name.substr(of + 4));
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The names of the folder's entries that end with .safetensors and do not start with a dot
// (editors' and macOS's "._x.safetensors" companions), sorted (byte order).
absl::StatusOr<std::vector<std::string>> ListSafetensorsNames(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(dir.c_str()), &closedir);
  if (d == nullptr) return internal::IoError(errno, "opendir", dir);
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = readdir(d.get())) {
    const absl::string_view name = e->d_name;
    if (name.size() > kSuffix.size() && name[0] != '.' && absl::EndsWith(name, kSuffix)) {
      if (static_cast<int64_t>(names.size()) >= internal::kMaxHfIndexFiles) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": more than ", internal::kMaxHfIndexFiles, " *.safetensors files"));
      }
      names.emplace_back(name);
    }
    errno = 0;
  }
  if (errno != 0) return internal::IoError(errno, "readdir", dir);
  std::sort(names.begin(), names.end());
  return names;
}

// The path to open for the entry `name` of `dir`: dir/name, or where the link dir/name
// resolves to when that is a file directly inside the same folder. NotFound for a missing
// entry; InvalidArgument for a link leaving the folder. `what` says what the entry is for
// messages ("file \"a.safetensors\" (weight_map: tensor \"w\")").
absl::StatusOr<std::string> ResolveInFolder(const std::string& dir, const std::string& name,
                                            const std::string& what) {
  const std::string path = absl::StrCat(dir, "/", name);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(dir, ": ", what, " is missing"));
    return absl::Status(absl::ErrnoToStatusCode(err),
                        absl::StrCat(dir, ": ", what, ": lstat: ", std::strerror(err)));
  }
  if (!S_ISLNK(st.st_mode)) return path;
  char resolved[PATH_MAX];
  char folder[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr || realpath(dir.c_str(), folder) == nullptr) {
    const int err = errno;
    return absl::Status(
        err == ENOENT ? absl::StatusCode::kNotFound : absl::ErrnoToStatusCode(err),
        absl::StrCat(dir, ": ", what, " is a link that cannot be resolved: ", std::strerror(err)));
  }
  const absl::string_view target = resolved;
  const size_t slash = target.rfind('/');
  const absl::string_view parent = slash == 0 ? "/" : target.substr(0, slash);
  if (parent != folder) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": ", what, " is a link to ", target, ", outside the folder; refused"));
  }
  return std::string(target);
}

// Opens the entry `name` of `dir` (ResolveInFolder) as a safetensors file.
absl::StatusOr<SafetensorsFile> OpenInFolder(const std::string& dir, const std::string& name,
                                             const std::string& what,
                                             const SafetensorsFile::Options& options) {
  SDRT_ASSIGN_OR_RETURN(const std::string path, ResolveInFolder(dir, name, what));
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path, options);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat(dir, ": ", what, ": ", file.status().message()));
  }
  return file;
}

}  // namespace

absl::string_view CheckpointKindName(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kSafetensorsFile:
      return "safetensors file";
    case CheckpointKind::kHfFolder:
      return "Hugging Face folder";
    case CheckpointKind::kSafetensorsFolder:
      return "safetensors folder";
    case CheckpointKind::kShardedFolder:
      return "sdrt sharded folder";
  }
  return "unknown";
}

absl::StatusOr<CheckpointKind> DetectCheckpointKind(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": ", std::strerror(err)));
  }
  if (!S_ISDIR(st.st_mode)) return CheckpointKind::kSafetensorsFile;
  if (Exists(absl::StrCat(path, "/", kShardedCheckpointIndexName))) {
    return CheckpointKind::kShardedFolder;
  }
  if (Exists(absl::StrCat(path, "/", kHfIndexFileName))) return CheckpointKind::kHfFolder;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListSafetensorsNames(path));
  if (names.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a checkpoint folder: no ",
                                                   kShardedCheckpointIndexName, ", ",
                                                   kHfIndexFileName, " or *.safetensors file"));
  }
  return std::all_of(names.begin(), names.end(), IsRankFileName)
             ? CheckpointKind::kShardedFolder
             : CheckpointKind::kSafetensorsFolder;
}

CheckpointSource CheckpointSource::FromFile(SafetensorsFile file, std::string name) {
  CheckpointSource source;
  source.kind_ = CheckpointKind::kSafetensorsFile;
  source.path_ = name;
  source.files_.push_back({name, name, file.file_size(), file.file_device(), file.file_inode()});
  source.mapped_.push_back(std::move(file));
  // A single file cannot repeat a name or disagree with itself.
  const absl::Status ok = source.AddFile(0, source.path_);
  (void)ok;
  return source;
}

absl::Status CheckpointSource::AddFile(int i, const std::string& dir) {
  const SafetensorsFile& file = mapped_[static_cast<size_t>(i)];
  const std::string& name = files_[static_cast<size_t>(i)].name;
  for (const SafetensorsEntry& e : file.entries()) {
    const auto [it, inserted] = index_.emplace(e.name, tensors_.size());
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": tensor \"", e.name, "\" is in both ",
                       files_[static_cast<size_t>(tensors_[it->second].file)].name, " and ", name,
                       " (a tensor may be in one file only)"));
    }
    tensors_.push_back({e.name, e.dtype, e.shape, i, file.data_offset() + e.data_begin,
                        e.data_end - e.data_begin});
    total_bytes_ += e.data_end - e.data_begin;
  }
  for (const auto& [key, value] : file.metadata()) {
    const auto [it, inserted] = metadata_.emplace(key, value);
    if (inserted) {
      metadata_file_[key] = i;
    } else if (it->second != value) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": __metadata__ \"", key, "\" is \"", it->second, "\" in ",
          files_[static_cast<size_t>(metadata_file_[key])].name, " but \"", value, "\" in ", name));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointSource> CheckpointSource::Open(const std::string& path,
                                                        const Options& options) {
  // Anything but a folder is read, and its errors reported, by SafetensorsFile::Open.
  struct stat st;
  const bool folder = stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  SDRT_ASSIGN_OR_RETURN(const CheckpointKind kind,
                        folder ? DetectCheckpointKind(path) : CheckpointKind::kSafetensorsFile);
  if (kind == CheckpointKind::kSafetensorsFile) {
    SDRT_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path, options.file_options));
    return FromFile(std::move(file), path);
  }
  CheckpointSource source;
  source.kind_ = kind;
  source.path_ = path;
  const std::string& dir = path;
  if (kind == CheckpointKind::kShardedFolder) {
    ReadShardedCheckpointOptions read_options;
    read_options.check_rank_files = false;  // each is checked by the rank that reads it
    SDRT_ASSIGN_OR_RETURN(ShardedCheckpointIndex index,
                          ReadShardedCheckpointIndex(dir, read_options));
    for (const ShardedCheckpointTensor& t : index.tensors) {
      // The index bounds every shape (ReadShardedCheckpointIndex).
      SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(t.shape));
      SDRT_ASSIGN_OR_RETURN(const int64_t nbytes, BytesForElements(t.dtype, numel));
      source.index_.emplace(t.name, source.tensors_.size());
      source.tensors_.push_back({t.name, t.dtype, t.shape, /*file=*/-1, /*offset=*/0, nbytes});
      source.total_bytes_ += nbytes;
    }
    source.metadata_ = index.metadata;
    source.sharded_ = std::make_shared<const ShardedCheckpointIndex>(std::move(index));
    return source;
  }
  if (kind == CheckpointKind::kSafetensorsFolder) {
    SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListSafetensorsNames(dir));
    for (const std::string& name : names) {
      SDRT_ASSIGN_OR_RETURN(
          SafetensorsFile file,
          OpenInFolder(dir, name, absl::StrCat("file ", name), options.file_options));
      source.files_.push_back({name, absl::StrCat(dir, "/", name), file.file_size(),
                               file.file_device(), file.file_inode()});
      source.mapped_.push_back(std::move(file));
      SDRT_RETURN_IF_ERROR(source.AddFile(static_cast<int>(source.files_.size()) - 1, dir));
    }
    return source;
  }

  // A Hugging Face folder.
  const std::string index_name(kHfIndexFileName);
  const std::string index_path = absl::StrCat(dir, "/", index_name);
  SDRT_ASSIGN_OR_RETURN(const std::string resolved_index,
                        ResolveInFolder(dir, index_name, index_name));
  absl::StatusOr<std::string> text =
      internal::ReadBoundedFile(resolved_index, internal::kMaxJsonFileBytes);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(index_path, ": ", text.status().message()));
  }
  SDRT_ASSIGN_OR_RETURN(internal::HfIndex index, internal::ParseHfIndex(*text, index_path));
  absl::flat_hash_map<std::string, std::string> weight_map;
  absl::flat_hash_map<std::string, std::string> first_tensor;  // file -> a tensor naming it
  for (const auto& [tensor, file] : index.weight_map) {
    weight_map.emplace(tensor, file);
    first_tensor.emplace(file, tensor);
  }
  for (const std::string& name : index.files) {
    SDRT_ASSIGN_OR_RETURN(
        SafetensorsFile file,
        OpenInFolder(dir, name,
                     absl::StrCat("file ", name, " (", index_name, " maps tensor \"",
                                  first_tensor[name], "\" to it)"),
                     options.file_options));
    // Every tensor of this file must be in no other file and mapped to this one.
    for (const SafetensorsEntry& e : file.entries()) {
      const auto mapped = weight_map.find(e.name);
      const std::string said = mapped == weight_map.end()
                                   ? absl::StrCat(index_name, "'s weight_map does not name it")
                                   : absl::StrCat(index_name, " maps it to ", mapped->second);
      if (const CheckpointSourceTensor* seen = source.Find(e.name); seen != nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor \"", e.name, "\" is in both ",
                         source.files_[static_cast<size_t>(seen->file)].name, " and ", name,
                         " (a tensor may be in one file only); ", said));
      }
      if (mapped == weight_map.end() || mapped->second != name) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor \"", e.name, "\" is in ", name, " but ", said));
      }
    }
    source.files_.push_back({name, absl::StrCat(dir, "/", name), file.file_size(),
                             file.file_device(), file.file_inode()});
    source.mapped_.push_back(std::move(file));
    SDRT_RETURN_IF_ERROR(source.AddFile(static_cast<int>(source.files_.size()) - 1, dir));
  }
  // Every tensor of the map must be in its file.
  for (const auto& [tensor, file] : index.weight_map) {
    if (source.Find(tensor) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor \"", tensor, "\": ", index_name,
                                                     " maps it to ", file,
                                                     ", which does not hold it"));
    }
  }
  if (index.total_size.has_value() && *index.total_size != source.total_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": metadata.total_size is ", *index.total_size, " bytes but the ",
                     source.tensors_.size(), " tensors of the ", source.files_.size(), " files (",
                     source.files_.front().name, " ...) hold ", source.total_bytes_, " bytes"));
  }
  source.index_metadata_ = std::move(index.metadata);
  return source;
}

const CheckpointSourceTensor* CheckpointSource::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<SafetensorsTensorSpec> CheckpointSource::TensorSpecs() const {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors_.size());
  for (const CheckpointSourceTensor& t : tensors_) specs.push_back({t.name, t.dtype, t.shape});
  return specs;
}

absl::StatusOr<Tensor> CheckpointSource::Get(absl::string_view name) const {
  const CheckpointSourceTensor* t = Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor \"", name, "\""));
  }
  if (t->file < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor \"", name,
        "\" is cut into the rank files of an sdrt sharded folder (load it with LoadStateDict "
        "or gather it; no whole tensor is on disk)"));
  }
  return file(t->file).Get(name);
}

}  // namespace sdrt
