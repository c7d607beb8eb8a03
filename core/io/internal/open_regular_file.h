// Opening an input file that sdrt reads whole or maps (ReadBoundedFile, SafetensorsFile::Open,
// LoadOptions::map_results): one place that refuses anything but a regular file without ever
// blocking on it, and maps one.
#ifndef SDRT_CORE_IO_INTERNAL_OPEN_REGULAR_FILE_H_
#define SDRT_CORE_IO_INTERNAL_OPEN_REGULAR_FILE_H_

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/tensor/storage.h"

namespace sdrt::internal {

// Which file a path named when it was opened: fstat's st_dev and st_ino, and its size.
// All 0 for bytes that are no file (SafetensorsFile::FromBuffer).
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t size = 0;
};

// The identity a stat or fstat reports.
FileIdentity IdentityOf(const struct stat& st);

// Whether `now` is another file than `opened` (another device or inode); false when
// `opened`'s device and inode are unknown (0).
bool IsOtherFile(const FileIdentity& opened, const FileIdentity& now);

// `now` (of `path` opened again) against `opened`: DataLoss when another file now has the
// name ("<path>: replaced since it was opened: another file now has its name") or its size
// changed ("<path>: size changed from A to B bytes since it was opened"), as a read of it
// would then be of other bytes than its header describes (a runtime failure, like a short
// read); OK otherwise. With `opened`'s device and inode unknown (0), the size alone.
absl::Status CheckSameFile(const std::string& path, const FileIdentity& opened,
                           const FileIdentity& now);

// A regular file open for reading; owns its descriptor (closed on destruction). Move-only.
class RegularFile {
 public:
  RegularFile(int fd, FileIdentity identity) : fd_(fd), identity_(identity) {}
  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  // The size fstat reported when the file was opened, bytes.
  int64_t size() const { return identity_.size; }
  const FileIdentity& identity() const { return identity_; }

 private:
  int fd_ = -1;
  FileIdentity identity_;
};

// Opens `path` read-only (a symlink to a regular file is followed) with O_NONBLOCK, so that
// opening a FIFO or a device never waits for a writer (it changes nothing for a regular
// file), and O_CLOEXEC; then fstat's the descriptor and refuses anything but a regular file.
//
// Errors (the message is the reason alone; callers prefix the path and what the file is):
//   open failed: the errno's code (NotFound for a missing file), "<strerror>";
//   fstat failed: the errno's code, "fstat: <strerror>";
//   not a regular file: InvalidArgument, "not a regular file (a FIFO)" (or a character
//     device, a block device, a socket, a folder).
absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path);

// The whole regular file at `path` (OpenRegularFile's rules) mapped MAP_PRIVATE, as a CPU
// Storage of kind kMappedFile whose release is munmap (the mapping keeps the file
// referenced once the descriptor is closed, also when its name is removed): PROT_READ, or
// with `writable` PROT_READ | PROT_WRITE and MAP_NORESERVE, a write copying the page for
// this mapping alone (memory then, not reserved up front).
// nbytes() is the size fstat reported; an empty file is an empty storage (null data).
// `identity`, when not null, gets the file's. Errors: OpenRegularFile's; mmap's errno,
// "mmap: <strerror>".
absl::StatusOr<std::shared_ptr<Storage>> MapRegularFile(const std::string& path, bool writable,
                                                        FileIdentity* identity = nullptr);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_IO_INTERNAL_OPEN_REGULAR_FILE_H_
