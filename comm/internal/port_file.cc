#include "sdrt/comm/internal/port_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

absl::Status Os(absl::string_view what, const std::string& path) {
  const int error = errno;
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

// OK when `port` is 1 to max_bytes - 1 printable ASCII bytes without spaces (what
// MPI_Open_port writes into a buffer of MPI_MAX_PORT_NAME bytes).
absl::Status CheckPortName(absl::string_view port, int max_bytes, const std::string& path) {
  if (port.empty() || port.size() >= static_cast<size_t>(max_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("port file ", path, ": a port name of ",
                                                   port.size(), " bytes (1 to ", max_bytes - 1,
                                                   " expected)"));
  }
  for (const char c : port) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(absl::StrCat(
          "port file ", path, ": byte ", static_cast<int>(static_cast<unsigned char>(c)),
          " is not part of a port name (printable ASCII without spaces)"));
    }
  }
  return absl::OkStatus();
}

// Closes the descriptor when it goes out of scope.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string ClaimedPath(absl::string_view path) { return absl::StrCat(path, ".claimed"); }

std::string LockPath(absl::string_view path) { return absl::StrCat(path, ".lock"); }

absl::StatusOr<PortLock> PortLock::Take(const std::string& path) {
  const std::string lock = LockPath(path);
  // A holder removes its lock file while it still holds the lock; a file opened just before
  // that is locked once it is no longer the one at `lock`, hence the check and the retry.
  for (int attempt = 0; attempt < 100; ++attempt) {
    constexpr int kFlags = O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    bool created = true;
    int fd = open(lock.c_str(), kFlags | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
      created = false;
      fd = open(lock.c_str(), kFlags);
      if (fd < 0 && errno == ENOENT) continue;  // removed by its holder in between
    }
    if (fd < 0) {
      if (errno == ELOOP) {
        return absl::InvalidArgumentError(absl::StrCat("lock file ", lock, " is a symlink"));
      }
      return Os("cannot open lock file", lock);
    }
    Fd file{fd};
    struct stat held;
    if (fstat(fd, &held) != 0) return Os("cannot stat lock file", lock);
    if (!S_ISREG(held.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("lock file ", lock, " is not a regular file"));
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) {
        return absl::FailedPreconditionError(absl::StrCat(
            "another job is accepting on port file ", path, " (it holds ", lock,
            "); give each trainer its own port file"));
      }
      return Os("cannot lock", lock);
    }
    struct stat now;
    if (lstat(lock.c_str(), &now) != 0 || now.st_ino != held.st_ino ||
        now.st_dev != held.st_dev) {
      continue;  // locked a file its holder had just removed
    }
    file.fd = -1;
    return PortLock(fd, lock, created);
  }
  return absl::UnavailableError(absl::StrCat("lock file ", lock, " kept being replaced"));
}

void PortLock::Release() {
  if (fd_ < 0) return;
  // Removed while still held: a job that opens it afterwards finds it gone, or locks an
  // unlinked file and tries again (Take).
  if (created_) unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
}

absl::Status CheckReplaceable(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("port file ", path, " exists and is not a regular file; not replacing it"));
  }
  return absl::OkStatus();
}

absl::Status WritePortFile(const std::string& path, absl::string_view port, int max_bytes) {
  if (absl::Status s = CheckPortName(port, max_bytes, path); !s.ok()) return s;
  if (absl::Status s = CheckReplaceable(path); !s.ok()) return s;
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  Fd file{open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
  if (file.fd < 0) return Os("cannot create", temp);
  const std::string text = absl::StrCat(port, "\n");
  absl::Status status;
  if (write(file.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    status = Os("cannot write", temp);
  } else if (fsync(file.fd) != 0) {
    status = Os("cannot fsync", temp);
  } else if (rename(temp.c_str(), path.c_str()) != 0) {
    status = Os(absl::StrCat("cannot rename ", temp, " to"), path);
  }
  if (!status.ok()) unlink(temp.c_str());
  return status;
}

absl::StatusOr<std::string> ReadPortFile(const std::string& path, int max_bytes) {
  Fd file{open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("no port file ", path));
    if (errno == ELOOP) {
      return absl::InvalidArgumentError(absl::StrCat("port file ", path, " is a symlink"));
    }
    return Os("cannot open port file", path);
  }
  struct stat st;
  if (fstat(file.fd, &st) != 0) return Os("cannot stat port file", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("port file ", path, " is not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("port file ", path, " has ", st.st_size,
                                                   " bytes (at most ", max_bytes, ")"));
  }
  // One byte more than allowed, to see a file that grew after fstat.
  std::string text(static_cast<size_t>(max_bytes) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(file.fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Os("cannot read port file", path);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > static_cast<size_t>(max_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("port file ", path, " has more than ", max_bytes, " bytes"));
  }
  text.resize(got);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  if (absl::Status s = CheckPortName(text, max_bytes, path); !s.ok()) return s;
  return text;
}

absl::Status Claim(const std::string& path) {
  const std::string claimed = ClaimedPath(path);
  if (renameat2(AT_FDCWD, path.c_str(), AT_FDCWD, claimed.c_str(), RENAME_NOREPLACE) == 0) {
    return absl::OkStatus();
  }
  if (errno == ENOENT) return absl::NotFoundError(absl::StrCat("port file ", path, " is gone"));
  if (errno == EEXIST) {
    return absl::AlreadyExistsError(absl::StrCat(
        claimed, " exists: another connector holds this port, or a claim was left behind "
                 "by a job that died (remove it once no job uses ", path, ")"));
  }
  return Os(absl::StrCat("cannot rename ", path, " to"), claimed);
}

absl::Status RemoveIfHolds(const std::string& path, absl::string_view port, int max_bytes) {
  absl::StatusOr<std::string> held = ReadPortFile(path, max_bytes);
  if (!held.ok() || *held != port) return absl::OkStatus();
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return Os("cannot remove", path);
  return absl::OkStatus();
}

}  // namespace sdrt::internal
