// Writing files and folders so that a reader sees the old content or the new one, never a
// part: everything is written under a temporary name of its own beside the target, made
// durable (fsync), and renamed into place; on any error the temporary name is removed and
// the target is untouched. Used by WriteSafetensors (one file), WriteShardedCheckpoint and
// WriteHfCheckpoint (one folder of files).
//
// Temporary names are `.<base>.tmp.<pid>.<hex>` in the target's folder: created exclusively
// (O_EXCL / mkdir), distinct per process, call and run, and removed by the object that
// created them, by RemoveTemporaryPaths (an interrupted process: each name is registered
// before it is created, so a signal arriving once it exists finds it), or, when the process
// was killed before either could run, by the next Create for the same target in the same
// folder: it removes the names of exactly that form whose pid is no longer a live process
// on this machine (kill(pid, 0) gives ESRCH; a live or reused pid keeps its names).
// Every error is an absl::Status from errno (absl::ErrnoToStatus: ENOENT
// is NotFound, EACCES PermissionDenied, ENOSPC ResourceExhausted, ...) whose message names
// the system call and the path.
// Not API: plumbing shared across folders, in namespace sdrt::internal (hidden, never in
// libsdrt.so's exported symbols).
#ifndef SDRT_CORE_IO_ATOMIC_FILE_H_
#define SDRT_CORE_IO_ATOMIC_FILE_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// The status of a failed system call `call` on `path` with errno `err`:
// `<call>("<path>"): <strerror>`, the code absl::ErrnoToStatus gives.
absl::Status IoError(int err, absl::string_view call, absl::string_view path);

// A new temporary file beside a target; unlinked on destruction unless Commit() renamed it
// over the target. Move-only.
class AtomicFile {
 public:
  // Creates `.<base>.tmp.<pid>.<hex>` in `dir` for writing. `mode`: the permission bits to
  // give the file (fchmod, so the umask does not apply; the file is owner-only until then),
  // or -1 for 0666 & ~umask, as a newly created file gets. Errors: those of open and fchmod.
  static absl::StatusOr<AtomicFile> Create(const std::string& dir, const std::string& base,
                                           int mode = -1);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  ~AtomicFile();

  const std::string& path() const { return path_; }

  // Appends `nbytes` bytes (any count: written in chunks, retried on EINTR and short
  // writes). Errors: those of write (e.g. ResourceExhausted for a full disk).
  absl::Status Write(const void* data, int64_t nbytes);

  // fsyncs and closes the file, renames it to `target` (which must be in the same
  // folder, `dir`), and fsyncs `dir`, so the new content survives a crash once this
  // returns OK. With `replace_existing` false a file already at `target` is refused
  // (AlreadyExists; renameat2's RENAME_NOREPLACE), not replaced. After a failed rename the
  // temporary file is still removed by the destructor.
  absl::Status Commit(const std::string& dir, const std::string& target,
                      bool replace_existing = true);

 private:
  AtomicFile() = default;
  std::string path_;
  int fd_ = -1;
};

// A temporary folder beside a target folder, removed with everything in it on destruction
// unless Install() moved it into place (in which case whatever it replaced is removed).
class AtomicFolder {
 public:
  // Creates `.<base>.tmp.<pid>.<hex>` in `parent`. Errors: those of mkdir.
  static absl::StatusOr<AtomicFolder> Create(const std::string& parent, const std::string& base);

  AtomicFolder(AtomicFolder&& other) noexcept;
  AtomicFolder& operator=(AtomicFolder&&) = delete;
  ~AtomicFolder();

  const std::string& path() const { return path_; }

  // Moves the folder to `target` in `parent` (the folder Create was given): with
  // `replace_existing` false, `target` must be absent or an empty folder (rename(2));
  // with true, `target` must be a folder, which is swapped atomically with this one
  // (renameat2 RENAME_EXCHANGE, or where the filesystem lacks it, moved aside, this one
  // renamed in, the old one put back if that fails) and then removed. fsyncs this folder
  // first and `parent` after. Errors: those of the system calls.
  absl::Status Install(const std::string& parent, const std::string& target, bool replace_existing);

 private:
  AtomicFolder() = default;
  std::string path_;
};

// Removes every temporary file and folder this process created through AtomicFile and
// AtomicFolder that is not yet committed, installed or removed, and returns how many (a
// folder another thread is still writing into is removed pass after pass until it is gone,
// at most 100 passes). A name registered but not yet made on disk stays registered: a
// later call removes it once its creator has made it. For a command interrupted by a
// signal: call it from a normal thread (it takes a lock and allocates; not
// async-signal-safe), then end the process without running destructors (_exit), since the
// objects' own cleanup may be in progress on other threads.
int RemoveTemporaryPaths();

// From now on AtomicFile::Create and AtomicFolder::Create make no temporary name (their
// error: ECANCELED's code, "Operation canceled"). For an interrupted command, before
// RemoveTemporaryPaths: what the command's threads would make after it is never made.
void RefuseNewTemporaryPaths();

// The folder and the last component of `path`, as Create and Commit take them:
// "a/b.st" -> {"a", "b.st"}, "b.st" -> {".", "b.st"}, "/b.st" -> {"/", "b.st"}, "a/" ->
// {"a", ""} (trailing slashes are the caller's to strip).
std::pair<std::string, std::string> SplitPath(const std::string& path);

// Writes `bytes` into a new file `path` (O_EXCL: an existing file is an error, AlreadyExists)
// and fsyncs it. For files inside an AtomicFolder, which is made visible as a whole.
absl::Status WriteNewFile(const std::string& path, absl::string_view bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_IO_ATOMIC_FILE_H_
