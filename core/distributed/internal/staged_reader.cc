// RunStagedReads (staged_reader.h): pread into a pool of buffers; one reader thread when
// there are at least two buffers.
#include "sdrt/core/distributed/internal/staged_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

inline constexpr int64_t kAlign = 16;

class Fd {
 public:
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int fd_ = -1;
};

absl::Status ErrnoError(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

// The tensor holding file offset `at` within `read` (the last segment starting at or before it).
size_t SegmentAt(const ReadPlan& plan, const Read& read, int64_t at) {
  size_t found = read.first_segment;
  for (size_t i = read.first_segment; i < read.first_segment + read.segment_count; ++i) {
    if (plan.segments[i].file_offset <= at) found = i;
  }
  return found;
}

class Reader {
 public:
  Reader(const std::vector<StagedFile>& files, const ReadPlan& plan,
         const std::function<std::string(size_t)>& name_of, std::vector<Fd>& fds,
         StagedReadStats& stats)
      : files_(files), plan_(plan), name_of_(name_of), fds_(fds), stats_(stats) {}

  absl::Status ReadInto(size_t k, Tensor& buffer) {
    const Read& r = plan_.reads[k];
    uint8_t* dst = buffer.data<uint8_t>() + r.offset % kAlign;
    const std::string& path = files_[static_cast<size_t>(r.file)].path;
    int64_t done = 0;
    while (done < r.bytes) {
      const ssize_t n = pread(fds_[static_cast<size_t>(r.file)].fd_, dst + done,
                              static_cast<size_t>(r.bytes - done), r.offset + done);
      ++preads_;
      if (n < 0 && errno == EINTR) continue;
      const int64_t at = r.offset + done;
      const std::string tensor = name_of_(SegmentAt(plan_, r, at));
      if (n < 0) {
        return ErrnoError(errno,
                          absl::StrCat(path, ": pread at offset ", at, " (tensor '", tensor, "')"));
      }
      if (n == 0) {
        return absl::DataLossError(
            absl::StrCat(path, ": short read at offset ", at, " (tensor '", tensor, "')"));
      }
      done += n;
    }
    bytes_read_ += r.bytes;
    return absl::OkStatus();
  }

  void Flush() {
    stats_.preads += preads_;
    stats_.bytes_read += bytes_read_;
  }

 private:
  const std::vector<StagedFile>& files_;
  const ReadPlan& plan_;
  const std::function<std::string(size_t)>& name_of_;
  std::vector<Fd>& fds_;
  StagedReadStats& stats_;
  int64_t preads_ = 0;
  int64_t bytes_read_ = 0;
};

}  // namespace

absl::Status RunStagedReads(const std::vector<StagedFile>& files, const ReadPlan& plan,
                            const std::function<std::string(size_t segment)>& name_of, int buffers,
                            int64_t buffer_bytes, const ConsumeRead& consume,
                            StagedReadStats& stats) {
  if (plan.reads.empty()) return absl::OkStatus();
  std::vector<Fd> fds(files.size());
  for (const Read& r : plan.reads) {
    const size_t f = static_cast<size_t>(r.file);
    if (fds[f].fd_ >= 0) continue;
    fds[f].fd_ = open(files[f].path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fds[f].fd_ < 0) return ErrnoError(errno, files[f].path);
    struct stat st;
    if (fstat(fds[f].fd_, &st) != 0) return ErrnoError(errno, files[f].path);
    if (st.st_size != files[f].size) {
      return absl::FailedPreconditionError(absl::StrCat(
          files[f].path, ": size changed from ", files[f].size, " to ", st.st_size, " bytes"));
    }
  }
  int64_t largest = 0;
  for (const Read& r : plan.reads) largest = std::max(largest, r.bytes);
  const int64_t each = std::min(buffer_bytes, largest) + kAlign;
  const size_t count =
      std::min<size_t>(static_cast<size_t>(std::max(buffers, 1)), plan.reads.size());
  std::vector<Tensor> pool;
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<Tensor> b = Tensor::Empty({each}, DType::kUInt8);
    if (!b.ok()) return b.status();
    pool.push_back(*std::move(b));
  }
  stats.peak_staging_bytes = std::max(stats.peak_staging_bytes, each * static_cast<int64_t>(count));
  Reader reader(files, plan, name_of, fds, stats);
  if (count == 1) {
    for (size_t k = 0; k < plan.reads.size(); ++k) {
      absl::Status s = reader.ReadInto(k, pool[0]);
      if (s.ok()) s = consume(plan.reads[k], pool[0], plan.reads[k].offset % kAlign);
      if (!s.ok()) {
        reader.Flush();
        return s;
      }
    }
    reader.Flush();
    return absl::OkStatus();
  }
  // A reader thread fills free buffers in read order; this thread consumes them in order.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> free_buffers;
  for (size_t i = 0; i < count; ++i) free_buffers.push_back(i);
  std::deque<std::pair<size_t, absl::Status>> filled;  // (buffer, read status), read order
  bool stop = false;
  std::thread thread([&] {
    for (size_t k = 0; k < plan.reads.size(); ++k) {
      size_t b;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !free_buffers.empty(); });
        if (stop) return;
        b = free_buffers.front();
        free_buffers.pop_front();
      }
      absl::Status s = reader.ReadInto(k, pool[b]);
      const bool failed = !s.ok();
      {
        std::lock_guard<std::mutex> lock(mu);
        filled.emplace_back(b, std::move(s));
      }
      cv.notify_all();
      if (failed) return;
    }
  });
  absl::Status status = absl::OkStatus();
  for (size_t k = 0; k < plan.reads.size() && status.ok(); ++k) {
    std::pair<size_t, absl::Status> item;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !filled.empty(); });
      item = std::move(filled.front());
      filled.pop_front();
    }
    status = item.second;
    if (status.ok())
      status = consume(plan.reads[k], pool[item.first], plan.reads[k].offset % kAlign);
    {
      std::lock_guard<std::mutex> lock(mu);
      free_buffers.push_back(item.first);
      if (!status.ok()) stop = true;
    }
    cv.notify_all();
  }
  thread.join();
  reader.Flush();
  return status;
}

}  // namespace sdrt::internal
