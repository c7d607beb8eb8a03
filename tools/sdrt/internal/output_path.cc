#include "sdrt/tools/sdrt/internal/output_path.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::cli {
namespace {

// realpath(3) of `path`; the errno's status naming it.
absl::StatusOr<std::string> RealPath(const std::string& path) {
  std::unique_ptr<char, decltype(&free)> resolved(realpath(path.c_str(), nullptr), &free);
  if (resolved == nullptr) return IoError(errno, "realpath", path);
  return std::string(resolved.get());
}

// Whether `path` is `folder` or lies inside it (both resolved, absolute).
bool IsWithin(const std::string& path, const std::string& folder) {
  return path == folder || folder == "/" || absl::StartsWith(path, folder + "/");
}

}  // namespace

absl::Status CheckOutputPath(const std::string& out, const std::vector<std::string>& inputs) {
  std::string trimmed = out;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : trimmed.substr(0, slash));
  const std::string base = slash == std::string::npos ? trimmed : trimmed.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat(out, " does not name a file or folder to write"));
  }
  struct stat st;
  if (lstat(trimmed.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(out,
                       " is a symbolic link; sdrt never writes through a link (it would "
                       "replace the file the link points at): remove it or name another path"));
    }
  } else if (errno != ENOENT) {
    return IoError(errno, "lstat", trimmed);
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
  }
  return absl::OkStatus();
}

absl::Status CheckReplaceableSafetensors(const std::string& out) {
  struct stat st;
  if (lstat(out.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : IoError(errno, "lstat", out);
  }
  const auto refuse = [&](absl::string_view why) {
    return absl::AlreadyExistsError(absl::StrCat(
        out, " exists and ", why, "; refusing to replace it (remove it or name another path)"));
  };
  if (!S_ISREG(st.st_mode)) return refuse("is not a regular file");
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out);
  if (!file.ok()) {
    return refuse(absl::StrCat("is not a safetensors file (", file.status().message(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::cli
