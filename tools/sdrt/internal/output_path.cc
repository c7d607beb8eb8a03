#include "sdrt/tools/sdrt/internal/output_path.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {
namespace {

// realpath(3) of `path`; the errno's status naming it.
absl::StatusOr<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path.c_str(), nullptr), &free);
  if (resolved == nullptr) return internal::IoError(errno, "realpath", path);
  return std::string(resolved.get());
}

// A file's identity: device and inode, so that two paths to one file (a symbolic link, a
// hard link, a bind mount) compare equal where their texts differ.
using FileId = std::pair<dev_t, ino_t>;

// The most entries of an input folder whose identities are taken (sdrt's folders hold
// index.json and one file per rank: at most kMaxMeshRanks + 1).
constexpr int kMaxInputEntries = (1 << 20) + 16;

// stat(2) of `path`, following links as a reader does; nullopt when it cannot be examined.
std::optional<struct stat> StatFollowing(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::nullopt;
  return st;
}

// The identities of `input` and, for a folder, of every entry in it (followed through
// links): every file a command reading `input` may open.
std::vector<std::pair<FileId, std::string>> InputIds(const std::string& input) {
  std::vector<std::pair<FileId, std::string>> ids;
  const std::optional<struct stat> st = StatFollowing(input);
  if (!st) return ids;
  ids.push_back({{st->st_dev, st->st_ino}, input});
  if (!S_ISDIR(st->st_mode)) return ids;
  struct CloseDir {
    void operator()(DIR* d) const { closedir(d); }
  };
  std::unique_ptr<DIR, CloseDir> dir(opendir(input.c_str()));
  if (dir == nullptr) return ids;
  while (const dirent* entry = readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (static_cast<int>(ids.size()) > kMaxInputEntries) break;
    const std::string path = absl::StrCat(input, "/", name);
    if (const std::optional<struct stat> e = StatFollowing(path)) {
      ids.push_back({{e->st_dev, e->st_ino}, path});
    }
  }
  return ids;
}

// InvalidArgument when `resolved` (the output, its folders resolved) is, or lies inside,
// one of the files or folders in `ids` by identity, which no path comparison sees through
// a link inside an input folder or a bind mount.
absl::Status CheckIdentity(const std::string& out, const std::string& resolved,
                           const std::vector<std::pair<FileId, std::string>>& ids) {
  std::string path = resolved;
  bool is_out = true;
  while (true) {
    if (const std::optional<struct stat> st = StatFollowing(path)) {
      for (const auto& [id, input] : ids) {
        if (id != FileId{st->st_dev, st->st_ino}) continue;
        return absl::InvalidArgumentError(
            is_out ? absl::StrCat(out, " is ", input, ", which this command reads (the same file)")
                   : absl::StrCat(out, " is inside ", input, ", which this command reads (", path,
                                  " is that folder)"));
      }
    }
    if (path == "/") break;
    const size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
    is_out = false;
  }
  return absl::OkStatus();
}

// Whether `path` is `folder` or lies inside it (both resolved, absolute).
bool IsWithin(const std::string& path, const std::string& folder) {
  return path == folder || folder == "/" || absl::StartsWith(path, folder + "/");
}

// The longest leading part of `folder` that exists: what is in the way when a path through
// it meets ENOTDIR.
std::string InTheWay(std::string folder) {
  struct stat st;
  while (lstat(folder.c_str(), &st) != 0) {
    std::string up = internal::SplitPath(folder).first;
    if (up == folder) break;
    folder = std::move(up);
  }
  return folder;
}

}  // namespace

absl::Status CheckOutputPath(const std::string& out, const std::vector<std::string>& inputs) {
  std::string trimmed = out;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const auto [folder, base] = internal::SplitPath(trimmed);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", out, "\" does not name a file or folder to write"));
  }
  struct stat st;
  if (lstat(trimmed.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(out,
                       " is a symbolic link; sdrt never writes through a link (it would "
                       "replace the file the link points at): remove it or name another path"));
    }
  } else if (errno == ENOTDIR) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write ", out, ": ", InTheWay(folder), " is not a folder"));
  } else if (errno != ENOENT) {
    return internal::IoError(errno, "lstat", trimmed);
  }
  absl::StatusOr<std::string> resolved_folder = RealPath(folder);
  if (!resolved_folder.ok()) {
    if (absl::IsNotFound(resolved_folder.status())) {
      return absl::NotFoundError(absl::StrCat("the folder of ", out, " does not exist"));
    }
    return resolved_folder.status();
  }
  const std::string resolved =
      *resolved_folder == "/" ? "/" + base : absl::StrCat(*resolved_folder, "/", base);
  for (const std::string& input : inputs) {
    absl::StatusOr<std::string> in = RealPath(input);
    if (!in.ok()) continue;  // reading it reports why
    if (resolved == *in) {
      return absl::InvalidArgumentError(absl::StrCat(
          out, " is ", input, ", which this command reads (both resolve to ", resolved, ")"));
    }
    if (IsWithin(resolved, *in)) {
      return absl::InvalidArgumentError(absl::StrCat(out, " is inside ", input,
                                                     ", which this command reads (", resolved,
                                                     " is inside ", *in, ")"));
    }
    if (IsWithin(*in, resolved)) {
      return absl::InvalidArgumentError(absl::StrCat(out, " contains ", input,
                                                     ", which this command reads (", *in,
                                                     " is inside ", resolved, ")"));
    }
    const std::vector<std::pair<FileId, std::string>> ids = InputIds(input);
    SDRT_RETURN_IF_ERROR(CheckIdentity(out, resolved, ids));
    // A file of an input folder that links into `out`: replacing `out` (a folder, as a
    // whole) would replace what this command reads (a rank file linked into OUTDIR).
    for (const auto& entry : ids) {
      const std::string& path = entry.second;
      absl::StatusOr<std::string> target = RealPath(path);
      if (target.ok() && IsWithin(*target, resolved)) {
        return absl::InvalidArgumentError(absl::StrCat(out, " holds ", *target, ", which ", path,
                                                       " links to and this command reads"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReplaceableSafetensors(const std::string& out, bool overwrite) {
  struct stat st;
  if (lstat(out.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : internal::IoError(errno, "lstat", out);
  }
  const auto refuse = [&](absl::string_view why) {
    return absl::AlreadyExistsError(absl::StrCat(
        out, " exists and ", why, "; refusing to replace it (remove it or name another path)"));
  };
  if (!S_ISREG(st.st_mode)) return refuse("is not a regular file");
  SafetensorsFile::Options options;
  options.accept_header_only = true;  // `sdrt make --header-only`'s own output
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out, options);
  if (!file.ok()) {
    return refuse(absl::StrCat("is not a safetensors file (", file.status().message(), ")"));
  }
  if (!overwrite) {
    return absl::AlreadyExistsError(
        absl::StrCat(out, " exists; replace it with --overwrite, or name another path"));
  }
  return absl::OkStatus();
}

absl::Status CheckFreeSpace(const std::string& out, absl::Span<const SafetensorsTensorSpec> specs,
                            const std::map<std::string, std::string>& metadata,
                            const WriteSafetensorsOptions& options) {
  SDRT_ASSIGN_OR_RETURN(const int64_t needed, SafetensorsFileBytes(specs, metadata, options));
  const size_t slash = out.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : out.substr(0, slash);
  struct statvfs fs;
  if (statvfs(dir.c_str(), &fs) != 0) return internal::IoError(errno, "statvfs", dir);
  const uint64_t block = fs.f_frsize > 0 ? fs.f_frsize : 1;
  const uint64_t blocks_needed = (static_cast<uint64_t>(needed) + block - 1) / block;
  if (fs.f_bavail >= blocks_needed) return absl::OkStatus();
  if (fs.f_blocks == 0) {  // no blocks at all: /proc, /sys, not a place for files
    return absl::FailedPreconditionError(absl::StrCat(
        out, ": ", dir, " is on a file system that holds no files (no blocks, as /proc)"));
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const double available = static_cast<double>(fs.f_bavail) * static_cast<double>(block);
  return absl::FailedPreconditionError(
      absl::StrFormat("%s needs %.2f GiB (%d bytes), %.2f GiB free on %s", out,
                      static_cast<double>(needed) / kGiB, needed, available / kGiB, dir));
}

}  // namespace sdrt::cli
