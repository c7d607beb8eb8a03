#include "sdrt/core/io/bounded_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/io/internal/open_regular_file.h"

namespace sdrt::internal {
namespace {

absl::Status TooLarge(int64_t size, int64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(size, " bytes, over the limit of ", max_bytes,
                                                 " bytes (", max_bytes >> 20, " MiB)"));
}

}  // namespace

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes) {
  absl::StatusOr<internal::RegularFile> file = internal::OpenRegularFile(path);
  if (!file.ok()) return file.status();
  if (file->size() > max_bytes) return TooLarge(file->size(), max_bytes);
  std::string text(static_cast<size_t>(file->size()) + 1, '\0');
  size_t done = 0;
  while (true) {
    if (done == text.size()) {  // grew since fstat: read on, up to the limit
      if (static_cast<int64_t>(done) > max_bytes) break;
      text.resize(std::min<size_t>(text.size() * 2, static_cast<size_t>(max_bytes) + 1));
    }
    const ssize_t n = read(file->fd(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "read");
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (static_cast<int64_t>(done) > max_bytes) return TooLarge(done, max_bytes);
  text.resize(done);
  return text;
}

}  // namespace sdrt::internal
