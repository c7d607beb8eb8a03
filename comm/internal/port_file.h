// The port file through which two separately launched MPI jobs meet (MpiCommunicator::Accept
// and Connect, comm/mpi_connect.cc). Internal to comm/; needs no MPI, so it is tested alone.
//
// The protocol, every file created and removed by the accepting side:
//   1. the acceptor writes its port name to `path` atomically (WritePortFile: a temporary
//      file in the same folder, fsync, rename over `path`);
//   2. a connector reads it (ReadPortFile) and claims it by renaming `path` to
//      ClaimedPath(path) (Claim), which succeeds for one connector only;
//   3. the acceptor, polling ClaimedPath(path) for its own port name, knows that a connector
//      is about to call MPI_Comm_connect, and only then enters MPI_Comm_accept (which has no
//      deadline of its own);
//   4. the acceptor removes whichever of the two names still holds its port name
//      (RemoveIfHolds), on success and on failure alike.
// Throughout, the acceptor holds an exclusive lock on LockPath(path) (PortLock), so that a
// second job accepting on the same path is refused instead of replacing the first one's
// port file (a connector would then meet the second job while the first waits in vain).
// Files are opened with O_NOFOLLOW and must be regular; a port name is at most `max_bytes`
// - 1 printable ASCII bytes without spaces, and a file larger than that is refused unread.
#ifndef SDRT_COMM_INTERNAL_PORT_FILE_H_
#define SDRT_COMM_INTERNAL_PORT_FILE_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// `path` + ".claimed": where a connector moves the port file to claim it.
std::string ClaimedPath(absl::string_view path);

// `path` + ".lock": the file whose lock the accepting job holds (PortLock).
std::string LockPath(absl::string_view path);

// An exclusive lock (flock) on LockPath(path), held by the job that accepts on `path` for as
// long as it offers its port; the kernel drops it when the process ends, however it ends, so
// a job that died leaves no lock behind. Move-only; released by the destructor, which also
// removes the lock file when this process created it.
class PortLock {
 public:
  // Takes the lock without waiting. FailedPrecondition when another process holds it (a job
  // accepting on the same port file; the message names both files); InvalidArgument when
  // LockPath(path) is a symlink or not a regular file; the OS error otherwise.
  static absl::StatusOr<PortLock> Take(const std::string& path);

  PortLock(PortLock&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        path_(std::move(other.path_)),
        created_(other.created_) {}
  PortLock& operator=(PortLock&& other) = delete;
  PortLock(const PortLock&) = delete;
  PortLock& operator=(const PortLock&) = delete;
  ~PortLock() { Release(); }

 private:
  PortLock(int fd, std::string path, bool created)
      : fd_(fd), path_(std::move(path)), created_(created) {}
  void Release();

  int fd_ = -1;
  std::string path_;  // LockPath(port file)
  bool created_ = false;
};

// InvalidArgument when `path` exists and is not a regular file (a symlink included);
// what the acceptor checks before it opens a port, and WritePortFile again.
absl::Status CheckReplaceable(const std::string& path);

// Writes `port` (plus a newline) to `path` through a temporary file in the same folder
// (O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600), fsync, rename. InvalidArgument when `path`
// exists and is not a regular file (a symlink included: it is never followed) or `port`
// is not a valid port name under `max_bytes`; the OS error (errno) as Unavailable or
// PermissionDenied otherwise. The temporary file is removed on every failure. (Not
// core/io/atomic_file.h's AtomicFile: comm sits below core, docs/ARCHITECTURE.md.)
absl::Status WritePortFile(const std::string& path, absl::string_view port, int max_bytes);

// The port name in `path`, a trailing newline removed. NotFound when the file does not
// exist (yet); InvalidArgument when it is not a regular file, is a symlink, is larger than
// `max_bytes` bytes, is empty, or holds anything but printable ASCII without spaces; the
// OS error otherwise.
absl::StatusOr<std::string> ReadPortFile(const std::string& path, int max_bytes);

// Renames `path` to ClaimedPath(path) unless the latter exists (renameat2 with
// RENAME_NOREPLACE). NotFound when `path` is gone (another connector claimed it, or the
// acceptor gave up); AlreadyExists when ClaimedPath(path) exists (a claim nobody removed:
// the message names it); the OS error otherwise.
absl::Status Claim(const std::string& path);

// Removes `path` when it is a regular file holding exactly `port` (the file this process
// wrote), and leaves anything else alone. OK when there was nothing to remove.
absl::Status RemoveIfHolds(const std::string& path, absl::string_view port, int max_bytes);

}  // namespace sdrt::internal

#endif  // SDRT_COMM_INTERNAL_PORT_FILE_H_
