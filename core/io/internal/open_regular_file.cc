#include "sdrt/core/io/internal/open_regular_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  return "not a file";
}

}  // namespace

FileIdentity IdentityOf(const struct stat& st) {
  return FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                      st.st_size};
}

bool IsOtherFile(const FileIdentity& opened, const FileIdentity& now) {
  const bool known = opened.device != 0 || opened.inode != 0;
  return known && (now.device != opened.device || now.inode != opened.inode);
}

absl::Status CheckSameFile(const std::string& path, const FileIdentity& opened,
                           const FileIdentity& now) {
  if (IsOtherFile(opened, now)) {
    return absl::DataLossError(
        absl::StrCat(path, ": replaced since it was opened: another file now has its name"));
  }
  if (now.size != opened.size) {
    return absl::DataLossError(absl::StrCat(path, ": size changed from ", opened.size, " to ",
                                            now.size, " bytes since it was opened"));
  }
  return absl::OkStatus();
}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), identity_(other.identity_) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    identity_ = other.identity_;
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    // A loop of symbolic links is a broken path, the caller's to mend (absl maps ELOOP to
    // Unknown).
    const absl::StatusCode code =
        err == ELOOP ? absl::StatusCode::kInvalidArgument : absl::ErrnoToStatusCode(err);
    return absl::Status(code, std::strerror(err));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return absl::ErrnoToStatus(err, "fstat");
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("not a regular file (", FileKind(st.st_mode), ")"));
  }
  return RegularFile(fd, IdentityOf(st));
}

absl::StatusOr<std::shared_ptr<Storage>> MapRegularFile(const std::string& path, bool writable,
                                                        FileIdentity* identity) {
  absl::StatusOr<RegularFile> file = OpenRegularFile(path);
  if (!file.ok()) return file.status();
  if (identity != nullptr) *identity = file->identity();
  const int64_t size = file->size();
  if (size == 0) {  // mmap refuses empty ranges
    return Storage::Wrap(nullptr, 0, Device::CPU(), StorageKind::kMappedFile, nullptr);
  }
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  // Writable: no swap reserved for the pages a write would copy (the file is the backing
  // of every page not written), so mapping a large file is not charged as new memory.
  const int flags = MAP_PRIVATE | (writable ? MAP_NORESERVE : 0);
  void* data = mmap(nullptr, static_cast<size_t>(size), protection, flags, file->fd(), 0);
  if (data == MAP_FAILED) return absl::ErrnoToStatus(errno, "mmap");
  return Storage::Wrap(data, size, Device::CPU(), StorageKind::kMappedFile,
                       [size](void* p) { munmap(p, static_cast<size_t>(size)); });
}

}  // namespace sdrt::internal
