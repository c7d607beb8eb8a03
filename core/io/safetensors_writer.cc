// WriteSafetensors: validate everything, then write the file through an AtomicFile
// (core/io/atomic_file.h: a temporary file beside the target, fsynced and renamed over it),
// so an error at any step leaves neither a partial target nor a stray temporary file. A
// symlink at the path is followed (the file it resolves to is replaced, the link stays) and
// an existing target's permission bits carry over to the new file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/core/io/internal/safetensors_header.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Symlinks followed before giving up with ELOOP, as Linux does (MAXSYMLINKS).
constexpr int kMaxSymlinks = 40;

// Where each tensor's bytes go: `entries` in the given order (the header's), `data_order`
// the indices of the tensors in the order of their bytes in the file.
struct Layout {
  std::vector<SafetensorsEntry> entries;
  std::vector<size_t> data_order;
};

// The layout for `specs`: the data sorted by element size, largest first, the given order
// within a size (the reference writer also sorts by alignment). Element sizes are powers of
// 2 and every tensor's byte count a multiple of its own, so each tensor starts at a multiple
// of its element size and, the data region starting at a multiple of 8, the zero-copy
// reader borrows every one. InvalidArgument for the reserved name, duplicates, a shape with
// a negative dim or too many bytes, and whatever `check(i)` (when given) returns for tensor
// i, checked in order after its name.
// With `given_order`, the data follows the given order instead (a tensor may then start
// at an address that is not a multiple of its element size; readers copy those).
absl::StatusOr<Layout> LayOut(absl::Span<const SafetensorsTensorSpec> specs, bool given_order,
                              const std::function<absl::Status(size_t)>& check) {
  Layout layout;
  std::set<absl::string_view> names;
  std::vector<int64_t> nbytes;
  for (size_t i = 0; i < specs.size(); ++i) {
    const SafetensorsTensorSpec& spec = specs[i];
    const std::string quoted = absl::StrCat("tensor \"", absl::CHexEscape(spec.name), "\"");
    if (spec.name == kSafetensorsMetadataKey) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, ": the name is reserved for the header's metadata"));
    }
    if (!names.insert(spec.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(quoted, ": duplicate name"));
    }
    if (check) {
      absl::Status status = check(i);
      if (!status.ok()) {
        return absl::Status(status.code(), absl::StrCat(quoted, ": ", status.message()));
      }
    }
    absl::StatusOr<int64_t> numel = CheckedNumel(spec.shape);
    absl::StatusOr<int64_t> bytes =
        numel.ok() ? BytesForElements(spec.dtype, *numel) : numel.status();
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(quoted, ": shape ", ShapeToString(spec.shape),
                       " is not a valid size: ", bytes.status().message()));
    }
    nbytes.push_back(*bytes);
    layout.entries.push_back(SafetensorsEntry{spec.name, spec.dtype, spec.shape, 0, 0});
    layout.data_order.push_back(layout.data_order.size());
  }
  if (!given_order) {
    std::stable_sort(layout.data_order.begin(), layout.data_order.end(), [&](size_t a, size_t b) {
      return ElementAlignment(specs[a].dtype) > ElementAlignment(specs[b].dtype);
    });
  }
  int64_t offset = 0;
  for (size_t i : layout.data_order) {
    if (nbytes[i] > std::numeric_limits<int64_t>::max() - offset) {
      return absl::InvalidArgumentError("the tensors hold more than 2^63 - 1 bytes");
    }
    layout.entries[i].data_begin = offset;
    offset += nbytes[i];
    layout.entries[i].data_end = offset;
  }
  return layout;
}

// The file `path` names once symlinks in its last component are followed, so that renaming
// over it replaces the file and keeps the link (a dangling link yields the path it names,
// where the file will be created). Symlinked folders need nothing: rename works through them.
absl::StatusOr<std::string> FollowSymlinks(const std::string& path) {
  std::string current = path;
  // The caller's message names `path`; a link's target is named here.
  auto fail = [&](int err, absl::string_view call) {
    return current == path ? absl::ErrnoToStatus(err, call) : internal::IoError(err, call, current);
  };
  for (int links = 0; links <= kMaxSymlinks; ++links) {
    struct stat st;
    if (lstat(current.c_str(), &st) != 0) {
      if (errno == ENOENT) return current;  // not there yet; creating the temp file tells
      return fail(errno, "lstat");
    }
    if (!S_ISLNK(st.st_mode)) return current;
    char target[PATH_MAX];
    const ssize_t n = readlink(current.c_str(), target, sizeof(target));
    if (n < 0) return fail(errno, "readlink");
    if (n == static_cast<ssize_t>(sizeof(target))) return fail(ENAMETOOLONG, "readlink");
    std::string next(target, static_cast<size_t>(n));
    if (next.empty() || next[0] != '/')
      next = absl::StrCat(internal::SplitPath(current).first, "/", next);
    current = std::move(next);
  }
  return absl::ErrnoToStatus(ELOOP, "following symbolic links");
}

// The header of `layout` with `metadata` (and, with options.header_only, its marker).
absl::StatusOr<std::string> HeaderOf(const Layout& layout,
                                     const std::map<std::string, std::string>& metadata,
                                     const WriteSafetensorsOptions& options) {
  if (!options.header_only) return internal::SerializeSafetensorsHeader(layout.entries, metadata);
  std::map<std::string, std::string> marked = metadata;
  marked[std::string(kSafetensorsHeaderOnlyKey)] = "true";
  return internal::SerializeSafetensorsHeader(layout.entries, marked);
}

absl::Status WriteAll(const std::string& path, absl::Span<const SafetensorsTensorSpec> specs,
                      const Layout& layout, const SafetensorsTensorSource& source,
                      const std::map<std::string, std::string>& metadata,
                      const WriteSafetensorsOptions& options) {
  SDRT_ASSIGN_OR_RETURN(const std::string header, HeaderOf(layout, metadata, options));
  if (internal::SplitPath(path).second.empty()) {
    return absl::InvalidArgumentError("the path names a folder, not a file");
  }
  std::string target = path;
  if (options.follow_symlinks) {
    SDRT_ASSIGN_OR_RETURN(target, FollowSymlinks(path));
  }
  const auto [dir, base] = internal::SplitPath(target);
  if (base.empty() || base == "." || base == "..") {
    return absl::InvalidArgumentError("the path names a folder, not a file");
  }
  int mode = -1;  // a new file's default
  struct stat st;
  if (lstat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode)) mode = st.st_mode & 07777;

  SDRT_ASSIGN_OR_RETURN(internal::AtomicFile file, internal::AtomicFile::Create(dir, base, mode));
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  SDRT_RETURN_IF_ERROR(file.Write(length, 8));
  SDRT_RETURN_IF_ERROR(file.Write(header.data(), static_cast<int64_t>(header.size())));
  for (size_t i : layout.data_order) {
    const SafetensorsEntry& entry = layout.entries[i];
    if (options.header_only) break;
    if (entry.data_end == entry.data_begin) continue;
    const std::string quoted = absl::StrCat("tensor \"", absl::CHexEscape(entry.name), "\"");
    absl::StatusOr<Tensor> tensor = source(i);
    if (!tensor.ok()) {
      return absl::Status(tensor.status().code(),
                          absl::StrCat(quoted, ": ", tensor.status().message()));
    }
    if (!tensor->defined() || tensor->is_meta() || tensor->dtype() != specs[i].dtype ||
        tensor->shape() != specs[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          quoted, ": the header says ", DTypeName(specs[i].dtype), ShapeToString(specs[i].shape),
          " but the source gave ", tensor->defined() ? tensor->ToString() : "an undefined tensor"));
    }
    absl::StatusOr<Tensor> host = tensor->To(Device::CPU());
    if (host.ok()) host = host->Contiguous();
    if (!host.ok()) {
      return absl::Status(host.status().code(), absl::StrCat(quoted, " (", tensor->ToString(),
                                                             "): ", host.status().message()));
    }
    SDRT_RETURN_IF_ERROR(file.Write(host->data_ptr(), host->nbytes()));
  }
  return file.Commit(dir, target, options.replace_existing);
}

absl::Status Prefixed(const std::string& path, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("WriteSafetensors(\"", path, "\"): ", status.message()));
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const std::pair<std::string, Tensor>> tensors,
                              const std::map<std::string, std::string>& metadata,
                              const WriteSafetensorsOptions& options) {
  std::vector<SafetensorsTensorSpec> specs(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    specs[i].name = tensors[i].first;
    const Tensor& t = tensors[i].second;
    if (t.defined() && !t.is_meta()) {
      specs[i].dtype = t.dtype();
      specs[i].shape = t.shape();
    }
  }
  const auto check = [&tensors](size_t i) -> absl::Status {
    const Tensor& t = tensors[i].second;
    if (t.defined() && !t.is_meta()) return absl::OkStatus();
    return absl::InvalidArgumentError(t.defined() ? "a meta tensor has no data"
                                                  : "undefined tensor");
  };
  absl::StatusOr<Layout> layout = LayOut(specs, options.data_in_given_order, check);
  if (!layout.ok()) return Prefixed(path, layout.status());
  const auto source = [&tensors](size_t i) -> absl::StatusOr<Tensor> { return tensors[i].second; };
  return Prefixed(path, WriteAll(path, specs, *layout, source, metadata, options));
}

absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      absl::Span<const SafetensorsTensorSpec> specs,
                                      const SafetensorsTensorSource& source,
                                      const std::map<std::string, std::string>& metadata,
                                      const WriteSafetensorsOptions& options) {
  absl::StatusOr<Layout> layout = LayOut(specs, options.data_in_given_order, nullptr);
  if (!layout.ok()) return Prefixed(path, layout.status());
  return Prefixed(path, WriteAll(path, specs, *layout, source, metadata, options));
}

absl::StatusOr<int64_t> SafetensorsFileBytes(absl::Span<const SafetensorsTensorSpec> specs,
                                             const std::map<std::string, std::string>& metadata,
                                             const WriteSafetensorsOptions& options) {
  SDRT_ASSIGN_OR_RETURN(const Layout layout, LayOut(specs, options.data_in_given_order, nullptr));
  SDRT_ASSIGN_OR_RETURN(const std::string header, HeaderOf(layout, metadata, options));
  int64_t data = 0;
  for (const SafetensorsEntry& e : layout.entries) {
    if (!options.header_only) data = std::max(data, e.data_end);
  }
  return 8 + static_cast<int64_t>(header.size()) + data;
}

}  // namespace sdrt
