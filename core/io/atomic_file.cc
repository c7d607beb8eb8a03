#include "sdrt/core/io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Largest single write(2); Linux transfers at most 0x7ffff000 bytes per call anyway.
constexpr int64_t kMaxWriteChunk = int64_t{1} << 30;

// Attempts at a fresh temporary name before giving up (each collision is EEXIST).
constexpr int kMaxNameAttempts = 100;

// The longest `base` a temporary name repeats whole: with ".", ".tmp.", a pid and a 16-digit
// tag the name stays within NAME_MAX (255 bytes) for any target name that is itself legal.
constexpr size_t kMaxStemBytes = 200;

// `base`, or for a longer one its first bytes and a hash of the whole (std::hash of
// libstdc++ is the same in every run, which the sweep of a later run relies on).
std::string TempStem(const std::string& base) {
  if (base.size() <= kMaxStemBytes) return base;
  return absl::StrCat(base.substr(0, kMaxStemBytes - 17), "~",
                      absl::Hex(std::hash<std::string>{}(base), absl::kZeroPad16));
}

// `.<stem>.tmp.<pid>.<hex>` in `dir`; the tag differs per process (pid), call (counter)
// and run (clock), and O_EXCL / mkdir settle the rest.
std::string TempName(const std::string& dir, const std::string& base) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t tag =
      (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull) ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return absl::StrCat(dir, "/.", TempStem(base), ".tmp.", getpid(), ".", absl::Hex(tag));
}

// The temporary paths this process has created and not yet renamed into place or removed,
// for RemoveTemporaryPaths (an interrupted command). Leaked: usable during exit.
struct Registry {
  std::mutex mu;
  std::set<std::string> paths;
  bool closed = false;  // RefuseNewTemporaryPaths: no new name is registered
};
Registry& Temporaries() {
  static Registry* registry = new Registry;
  return *registry;
}
// Registers `path` before it is created, so that a signal arriving once it exists always
// finds it registered: 0, or EEXIST when this process has it registered already (not
// created), ECANCELED once RefuseNewTemporaryPaths was called (an interrupted process).
int Register(const std::string& path) {
  std::lock_guard<std::mutex> lock(Temporaries().mu);
  if (Temporaries().closed) return ECANCELED;
  return Temporaries().paths.insert(path).second ? 0 : EEXIST;
}
void Unregister(const std::string& path) {
  std::lock_guard<std::mutex> lock(Temporaries().mu);
  Temporaries().paths.erase(path);
}

// The owner pid of `name` when it is exactly `.<base>.tmp.<pid>.<hex>` (TempName's form),
// else 0.
pid_t TempOwner(absl::string_view name, const std::string& base) {
  const std::string prefix = absl::StrCat(".", TempStem(base), ".tmp.");
  if (!absl::ConsumePrefix(&name, prefix)) return 0;
  const size_t dot = name.find('.');
  if (dot == absl::string_view::npos || dot == 0 || dot + 1 == name.size()) return 0;
  const absl::string_view pid_text = name.substr(0, dot);
  const absl::string_view tag = name.substr(dot + 1);
  const auto is_hex = [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); };
  const auto is_digit = [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); };
  if (!std::all_of(pid_text.begin(), pid_text.end(), is_digit) ||
      !std::all_of(tag.begin(), tag.end(), is_hex) || tag.size() > 16) {
    return 0;
  }
  int64_t pid = 0;
  if (!absl::SimpleAtoi(pid_text, &pid) || pid <= 0 || pid > INT32_MAX) return 0;
  return static_cast<pid_t>(pid);
}

// Passes RemoveTree makes over a folder whose entries keep changing.
constexpr int kMaxRemovePasses = 100;

// Removes `path` (a name of TempName's form) and everything in it, best effort. Another thread
// of this process may still be creating files inside by path (an interrupted writer while
// RemoveTemporaryPaths runs), as fast as a pass removes them. So the path is first renamed
// aside, to the same name with its tag's last digit changed (still TempName's form, so a
// removal cut short is swept later; never over an existing name): the writer's next file
// then fails to open instead of landing in the folder. A pass can still fail on an entry
// created in the instant of the rename; passes are repeated until one succeeds (the path
// is gone) or kMaxRemovePasses have failed.
void RemoveTree(const std::string& path) {
  std::string target = path;
  if (!path.empty()) {
    std::string aside = path;
    aside.back() = aside.back() == '0' ? '1' : '0';
    if (renameat2(AT_FDCWD, path.c_str(), AT_FDCWD, aside.c_str(), RENAME_NOREPLACE) == 0) {
      target = std::move(aside);
    }
  }
  for (int pass = 0; pass < kMaxRemovePasses; ++pass) {
    std::error_code error;
    std::filesystem::remove_all(target, error);
    if (!error) return;
  }
}

// Removes the temporary files and folders of `base` in `dir` that a process of this
// machine left behind when it was killed: names of TempName's exact form whose owner pid
// no longer exists (kill(pid, 0) fails with ESRCH). A live pid, even a reused one, keeps
// its names. Best effort: an unreadable folder is left to Create's own error.
void SweepStale(const std::string& dir, const std::string& base) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* e = readdir(d)) {
    const pid_t pid = TempOwner(e->d_name, base);
    if (pid != 0 && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH) {
      stale.push_back(absl::StrCat(dir, "/", e->d_name));
    }
  }
  closedir(d);
  for (const std::string& path : stale) RemoveTree(path);
}

absl::Status WriteAll(int fd, const std::string& path, const char* data, int64_t nbytes) {
  while (nbytes > 0) {
    const ssize_t n = write(fd, data, static_cast<size_t>(std::min(nbytes, kMaxWriteChunk)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(errno, "write", path);
    data += n;
    nbytes -= n;
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, "open", path);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  return rc == 0 ? absl::OkStatus() : IoError(err, "fsync", path);
}

}  // namespace

absl::Status IoError(int err, absl::string_view call, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(call, "(\"", path, "\")"));
}

void RefuseNewTemporaryPaths() {
  std::lock_guard<std::mutex> lock(Temporaries().mu);
  Temporaries().closed = true;
}

int RemoveTemporaryPaths() {
  std::lock_guard<std::mutex> lock(Temporaries().mu);
  int removed = 0;
  // A name registered but not made yet (its creator is between Register and open/mkdir)
  // stays registered, for a later call to remove once it exists.
  decltype(Temporaries().paths) not_made;
  for (const std::string& path : Temporaries().paths) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
      not_made.insert(path);
      continue;
    }
    RemoveTree(path);
    ++removed;
  }
  Temporaries().paths = std::move(not_made);
  return removed;
}

// --- AtomicFile --------------------------------------------------------------------------

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& dir, const std::string& base,
                                              int mode) {
  SweepStale(dir, base);
  for (int attempt = 0;; ++attempt) {
    AtomicFile file;
    std::string path = TempName(dir, base);
    int err = Register(path);  // a name this process has registered already is taken too
    if (err == 0) {
      file.fd_ =
          open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode < 0 ? 0666 : 0600);
      if (file.fd_ >= 0) {
        file.path_ = std::move(path);
        if (mode >= 0 && fchmod(file.fd_, static_cast<mode_t>(mode)) != 0) {
          return IoError(errno, "fchmod", file.path_);
        }
        return file;
      }
      err = errno;
      Unregister(path);  // not created: never unlink it
    }
    if (err != EEXIST || attempt == kMaxNameAttempts) {
      return IoError(err, "open", dir + "/." + base + ".tmp.*");
    }
  }
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::exchange(other.path_, {})), fd_(std::exchange(other.fd_, -1)) {}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) close(fd_);
  if (!path_.empty()) {
    unlink(path_.c_str());
    Unregister(path_);
  }
}

absl::Status AtomicFile::Write(const void* data, int64_t nbytes) {
  return WriteAll(fd_, path_, static_cast<const char*>(data), nbytes);
}

absl::Status AtomicFile::Commit(const std::string& dir, const std::string& target,
                                bool replace_existing) {
  if (fsync(fd_) != 0) return IoError(errno, "fsync", path_);
  const int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) return IoError(errno, "close", path_);
  const int renamed = replace_existing ? rename(path_.c_str(), target.c_str())
                                       : renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD,
                                                   target.c_str(), RENAME_NOREPLACE);
  if (renamed != 0) {
    const int err = errno;
    if (err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(target, " exists (written by another process meanwhile?); not replaced"));
    }
    return IoError(err, "rename", path_);
  }
  Unregister(path_);
  path_.clear();  // now the target's bytes
  return FsyncPath(dir);
}

// --- AtomicFolder ------------------------------------------------------------------------

absl::StatusOr<AtomicFolder> AtomicFolder::Create(const std::string& parent,
                                                  const std::string& base) {
  SweepStale(parent, base);
  SweepStale(parent, base + ".old");  // Install's fallback moves the old folder there
  for (int attempt = 0;; ++attempt) {
    std::string path = TempName(parent, base);
    int err = Register(path);  // a name this process has registered already is taken too
    if (err == 0) {
      if (mkdir(path.c_str(), 0777) == 0) {
        AtomicFolder folder;
        folder.path_ = std::move(path);
        return folder;
      }
      err = errno;
      Unregister(path);  // not created: never remove it
    }
    if (err != EEXIST || attempt == kMaxNameAttempts) return IoError(err, "mkdir", path);
  }
}

AtomicFolder::AtomicFolder(AtomicFolder&& other) noexcept : path_(std::exchange(other.path_, {})) {}

AtomicFolder::~AtomicFolder() {
  if (!path_.empty()) {
    RemoveTree(path_);
    Unregister(path_);
  }
}

absl::Status AtomicFolder::Install(const std::string& parent, const std::string& target,
                                   bool replace_existing) {
  SDRT_RETURN_IF_ERROR(FsyncPath(path_));
  if (!replace_existing) {
    if (rename(path_.c_str(), target.c_str()) != 0) return IoError(errno, "rename", path_);
    Unregister(path_);
    path_.clear();
    return FsyncPath(parent);
  }
  if (renameat2(AT_FDCWD, path_.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    // path_ now holds the old folder; the destructor removes it.
    return FsyncPath(parent);
  }
  if (errno != EINVAL && errno != ENOSYS) return IoError(errno, "renameat2", target);
  // No RENAME_EXCHANGE on this filesystem: move the old folder aside, this one in, and put
  // the old one back if that fails.
  const std::string base = std::filesystem::path(target).filename().string();
  SDRT_ASSIGN_OR_RETURN(AtomicFolder aside, Create(parent, base + ".old"));
  const std::string old = aside.path() + "/old";
  if (rename(target.c_str(), old.c_str()) != 0) return IoError(errno, "rename", target);
  if (rename(path_.c_str(), target.c_str()) != 0) {
    const int err = errno;
    rename(old.c_str(), target.c_str());
    return IoError(err, "rename", path_);
  }
  Unregister(path_);
  path_.clear();  // `aside` removes the old folder
  return FsyncPath(parent);
}

// --- WriteNewFile ------------------------------------------------------------------------

std::pair<std::string, std::string> SplitPath(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

absl::Status WriteNewFile(const std::string& path, absl::string_view bytes) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return IoError(errno, "open", path);
  absl::Status status = WriteAll(fd, path, bytes.data(), static_cast<int64_t>(bytes.size()));
  if (status.ok() && fsync(fd) != 0) status = IoError(errno, "fsync", path);
  if (close(fd) != 0 && status.ok()) status = IoError(errno, "close", path);
  return status;
}

}  // namespace sdrt::internal
