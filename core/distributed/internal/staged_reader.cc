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
// O_DIRECT's unit: buffer addresses, file offsets and lengths are multiples of it (4096
// covers every logical block size Linux file systems use).
inline constexpr int64_t kBlock = 4096;

// Where read `r`'s first byte sits in its buffer.
int64_t BaseOf(const Read& r, bool direct) { return r.offset % (direct ? kBlock : kAlign); }

// A view of `buffer` that starts at a multiple of kBlock (the buffer has kBlock spare).
absl::StatusOr<Tensor> BlockAligned(const Tensor& buffer) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  const int64_t skip = static_cast<int64_t>((kBlock - at % kBlock) % kBlock);
  return buffer.Narrow(0, skip, buffer.numel() - kBlock);
}

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
         StagedReadStats& stats, bool direct)
      : files_(files), plan_(plan), name_of_(name_of), fds_(fds), stats_(stats), direct_(direct) {}

  // Reads [start, end) of the file, where start = the read's offset rounded down to kBlock
  // with direct I/O (else the offset) and end likewise rounded up; with direct I/O the end
  // of the file may come before `end`, but not before the read's last byte.
  absl::Status ReadInto(size_t k, Tensor& buffer) {
    const Read& r = plan_.reads[k];
    const int64_t base = BaseOf(r, direct_);
    const int64_t start = r.offset - base;
    const int64_t needed = base + r.bytes;  // bytes from `start` the consumer needs
    const int64_t wanted = direct_ ? (needed + kBlock - 1) / kBlock * kBlock : needed;
    uint8_t* dst = buffer.data<uint8_t>() + (direct_ ? 0 : base);
    const std::string& path = files_[static_cast<size_t>(r.file)].path;
    int64_t done = direct_ ? 0 : base;
    const int64_t first = done;
    while (done < needed) {
      const ssize_t n = pread(fds_[static_cast<size_t>(r.file)].fd_, dst + done - first,
                              static_cast<size_t>(wanted - done), start + done);
      ++preads_;
      if (n < 0 && errno == EINTR) continue;
      const int64_t at = start + done;
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
    bytes_read_ += done - first;
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
  const bool direct_;
  int64_t preads_ = 0;
  int64_t bytes_read_ = 0;
};

}  // namespace

absl::Status RunStagedReads(const std::vector<StagedFile>& files, const ReadPlan& plan,
                            const std::function<std::string(size_t segment)>& name_of,
                            const StagingPool& pool_options, const ConsumeRead& consume,
                            StagedReadStats& stats) {
  if (plan.reads.empty()) return absl::OkStatus();
  const int buffers = pool_options.buffers;
  const int64_t buffer_bytes = pool_options.buffer_bytes;
  std::vector<Fd> fds(files.size());
  for (const Read& r : plan.reads) {
    const size_t f = static_cast<size_t>(r.file);
    if (fds[f].fd_ >= 0) continue;
    fds[f].fd_ = open(files[f].path.c_str(),
                      O_RDONLY | O_CLOEXEC | (pool_options.direct_io ? O_DIRECT : 0));
    if (fds[f].fd_ < 0 && errno == EINVAL && pool_options.direct_io) {
      return absl::InvalidArgumentError(
          absl::StrCat(files[f].path, ": its file system does not support O_DIRECT (direct I/O)"));
    }
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
  const bool direct = pool_options.direct_io;
  // Direct I/O: up to a block before and after the read, and a block to align the start.
  const int64_t each = std::min(buffer_bytes, largest) + (direct ? 3 * kBlock : kAlign);
  const size_t count =
      std::min<size_t>(static_cast<size_t>(std::max(buffers, 1)), plan.reads.size());
  std::vector<Tensor> pool;
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<Tensor> b = pool_options.allocate ? pool_options.allocate(each)
                                                     : Tensor::Empty({each}, DType::kUInt8);
    if (b.ok() && direct) b = BlockAligned(*b);
    if (!b.ok()) return b.status();
    pool.push_back(*std::move(b));
  }
  stats.peak_staging_bytes = std::max(stats.peak_staging_bytes, each * static_cast<int64_t>(count));
  Reader reader(files, plan, name_of, fds, stats, direct);
  // The first use of a buffer needs no wait; every later one waits for its last consumer.
  std::vector<bool> used(count, false);
  const auto ready = [&](size_t b) {
    if (!used[b] || !pool_options.before_refill) return absl::OkStatus();
    return pool_options.before_refill(b);
  };
  const auto finish = [&](absl::Status status) {
    reader.Flush();
    if (pool_options.drain) status.Update(pool_options.drain());
    return status;
  };
  if (count == 1) {
    for (size_t k = 0; k < plan.reads.size(); ++k) {
      absl::Status s = ready(0);
      if (s.ok()) s = reader.ReadInto(k, pool[0]);
      used[0] = true;
      if (s.ok()) s = consume(plan.reads[k], pool[0], BaseOf(plan.reads[k], direct), 0);
      if (!s.ok()) return finish(s);
    }
    return finish(absl::OkStatus());
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
      absl::Status s = ready(b);
      used[b] = true;
      if (s.ok()) s = reader.ReadInto(k, pool[b]);
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
    if (status.ok()) {
      status = consume(plan.reads[k], pool[item.first], BaseOf(plan.reads[k], direct),
                       item.first);
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      free_buffers.push_back(item.first);
      if (!status.ok()) stop = true;
    }
    cv.notify_all();
  }
  thread.join();
  return finish(status);
}

}  // namespace sdrt::internal
