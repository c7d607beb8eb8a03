#include "sdrt/core/io/bounded_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sdrt {
namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  return "not a file";
}

absl::Status TooLarge(int64_t size, int64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(size, " bytes, over the limit of ", max_bytes,
                                                 " bytes (", max_bytes >> 20, " MiB)"));
}

}  // namespace

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::Status(absl::ErrnoToStatusCode(errno), std::strerror(errno));
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
  if (st.st_size > max_bytes) {
    close(fd);
    return TooLarge(st.st_size, max_bytes);
  }
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t done = 0;
  while (true) {
    if (done == text.size()) {  // grew since fstat: read on, up to the limit
      if (static_cast<int64_t>(done) > max_bytes) break;
      text.resize(std::min<size_t>(text.size() * 2, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return absl::ErrnoToStatus(err, "read");
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  if (static_cast<int64_t>(done) > max_bytes) return TooLarge(done, max_bytes);
  text.resize(done);
  return text;
}

}  // namespace sdrt
