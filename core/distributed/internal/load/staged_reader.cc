// RunStagedReads (staged_reader.h): pread into a pool of buffers, consecutive small reads
// packed into one buffer, large reads with a direct target straight there; reader threads
// (one by default) when there are at least two buffers or several readers.
#include "sdrt/core/distributed/internal/load/staged_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/threads.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

inline constexpr int64_t kAlign = 16;
// Reads share a buffer up to this many bytes (see RunStagedReads).
inline constexpr int64_t kBatchBytes = int64_t{1} << 20;

// Reads [first, first + count) of a plan, read into one buffer in one turn; a direct read
// (read to its own destination, no buffer) is a batch of its own.
struct Batch {
  size_t first = 0;
  size_t count = 0;
  bool direct = false;
};
inline constexpr size_t kNoBuffer = ~size_t{0};
// O_DIRECT's unit: buffer addresses, file offsets and lengths are multiples of it (4096
// covers every logical block size Linux file systems use).
inline constexpr int64_t kBlock = 4096;

// A view of `buffer` that starts at a multiple of kBlock (the buffer has kBlock spare).
absl::StatusOr<Tensor> BlockAligned(const Tensor& buffer) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  const int64_t skip = static_cast<int64_t>((kBlock - at % kBlock) % kBlock);
  return buffer.Narrow(0, skip, buffer.numel() - kBlock);
}

absl::Status ErrnoError(int err, const std::string& what) {
  return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(what, ": ", std::strerror(err)));
}

// The files' descriptors of one reading thread, at most `max_open` open at once (all the
// threads together at most kMaxOpenFiles: a folder of 10,000 files loads under the default
// limit of 1,024 open files): a file is opened when a read first needs it, its size checked
// against the plan's, and the one opened longest ago is closed to make room (reads come file
// by file, so a file is seldom opened twice).
inline constexpr size_t kMaxOpenFiles = 64;
class OpenFiles {
 public:
  OpenFiles(const std::vector<StagedFile>& files, bool direct_io, size_t max_open)
      : files_(files), direct_io_(direct_io), max_open_(max_open), fd_of_(files.size(), -1) {}
  OpenFiles(const OpenFiles&) = delete;
  OpenFiles& operator=(const OpenFiles&) = delete;
  ~OpenFiles() {
    for (size_t f : order_) close(fd_of_[f]);
  }

  // The descriptor of file `f`. InvalidArgument when direct I/O is not supported there;
  // the errno of open or fstat; CheckSameFile's DataLoss when it is not the file opened.
  absl::StatusOr<int> Get(size_t f) {
    if (fd_of_[f] >= 0) return fd_of_[f];
    if (order_.size() >= max_open_) {
      close(fd_of_[order_.front()]);
      fd_of_[order_.front()] = -1;
      order_.pop_front();
    }
    const StagedFile& file = files_[f];
    const int fd = open(file.path.c_str(), O_RDONLY | O_CLOEXEC | (direct_io_ ? O_DIRECT : 0));
    if (fd < 0 && errno == EINVAL && direct_io_) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path, ": its file system does not support O_DIRECT (direct I/O)"));
    }
    if (fd < 0) return ErrnoError(errno, file.path);
    fd_of_[f] = fd;
    order_.push_back(f);
    struct stat st;
    if (fstat(fd, &st) != 0) return ErrnoError(errno, file.path);
    SDRT_RETURN_IF_ERROR(CheckSameFile(file.path, file.opened, IdentityOf(st)));
    return fd;
  }

 private:
  const std::vector<StagedFile>& files_;
  const bool direct_io_;
  const size_t max_open_;
  std::vector<int> fd_of_;   // -1: not open
  std::deque<size_t> order_;  // the open files, the first opened first
};

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
         const std::function<std::string(size_t)>& name_of, OpenFiles& fds,
         StagedReadStats& stats, bool direct_io)
      : files_(files),
        plan_(plan),
        name_of_(name_of),
        fds_(fds),
        stats_(stats),
        direct_io_(direct_io) {}

  // Reads plan.reads[k] to `dst`. With direct I/O `dst` is block-aligned and receives the
  // whole blocks around the read (the read's first byte at offset % kBlock); the end of
  // the file may come before the last block ends, but not before the read does.
  absl::Status ReadInto(size_t k, uint8_t* dst) {
    const Read& r = plan_.reads[k];
    const int64_t lead = direct_io_ ? r.offset % kBlock : 0;
    const int64_t start = r.offset - lead;
    const int64_t needed = lead + r.bytes;  // bytes from `start` the consumer needs
    const int64_t wanted = direct_io_ ? (needed + kBlock - 1) / kBlock * kBlock : needed;
    const std::string& path = files_[static_cast<size_t>(r.file)].path;
    SDRT_ASSIGN_OR_RETURN(const int fd, fds_.Get(static_cast<size_t>(r.file)));
    int64_t done = 0;
    while (done < needed) {
      const ssize_t n =
          pread(fd, dst + done, static_cast<size_t>(wanted - done), start + done);
      ++preads_;
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {  // the tensor is named only for the error
        const int err = errno;
        const int64_t at = start + done;
        const std::string tensor = name_of_(SegmentAt(plan_, r, at));
        if (n < 0) {
          return ErrnoError(
              err, absl::StrCat(path, ": pread at offset ", at, " (tensor '", tensor, "')"));
        }
        return absl::DataLossError(
            absl::StrCat(path, ": short read at offset ", at, " (tensor '", tensor, "')"));
      }
      done += n;
    }
    bytes_read_ += done;
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
  OpenFiles& fds_;
  StagedReadStats& stats_;
  const bool direct_io_;
  int64_t preads_ = 0;
  int64_t bytes_read_ = 0;
};

}  // namespace

absl::Status RunStagedReads(const std::vector<StagedFile>& files, const ReadPlan& plan,
                            const std::function<std::string(size_t segment)>& name_of,
                            const StagingPool& pool_options, const ConsumeRead& consume,
                            StagedReadStats& stats, const DirectTarget& direct_target) {
  if (plan.reads.empty()) return absl::OkStatus();
  const int readers = std::max(pool_options.readers, 1);
  // Each reader thread fills a buffer while the caller consumes another.
  const int buffers = PoolBuffers(pool_options.buffers, readers);
  const int64_t buffer_bytes = pool_options.buffer_bytes;
  const bool direct_io = pool_options.direct_io;
  // Direct I/O reads whole blocks into block-aligned memory: no read goes to a target
  // (its address is not aligned) and none shares a buffer.
  const DirectTarget direct = direct_io ? DirectTarget() : direct_target;
  // Reads with a direct target go there, consecutive ones in batches of about kBatchBytes.
  // The others are packed into buffers in order, each at a position congruent to its
  // offset modulo kAlign; a buffer holds at least kBatchBytes (or every read, if less), so
  // that many small reads cost one handoff between the threads, not one each.
  std::vector<uint8_t*> direct_to(plan.reads.size(), nullptr);
  int64_t largest = 0;
  int64_t padded = 0;
  for (size_t k = 0; k < plan.reads.size(); ++k) {
    const Read& r = plan.reads[k];
    if (direct) direct_to[k] = direct(r);
    if (direct_to[k] != nullptr) continue;
    largest = std::max(largest, r.bytes);
    padded += r.bytes + kAlign;
  }
  // Direct I/O: up to a block before and after the read, and a block to align the start.
  const int64_t each =
      direct_io ? std::min(buffer_bytes, largest) + 3 * kBlock
                : std::min(buffer_bytes, std::max(largest, std::min(kBatchBytes, padded))) + kAlign;
  std::vector<int64_t> bases(plan.reads.size());
  std::vector<Batch> batches;
  size_t staged_batches = 0;
  int64_t direct_bytes = 0;  // in the last direct batch
  for (size_t k = 0, used = 0; k < plan.reads.size(); ++k) {
    const Read& r = plan.reads[k];
    if (direct_to[k] != nullptr) {
      if (batches.empty() || !batches.back().direct || direct_bytes >= kBatchBytes) {
        batches.push_back(Batch{k, 0, true});
        direct_bytes = 0;
      }
      ++batches.back().count;
      direct_bytes += r.bytes;
      continue;
    }
    int64_t at = static_cast<int64_t>(used) + (r.offset - static_cast<int64_t>(used)) % kAlign;
    if (at < static_cast<int64_t>(used)) at += kAlign;
    if (batches.empty() || batches.back().direct || at + r.bytes > each || direct_io) {
      batches.push_back(Batch{k, 0, false});
      ++staged_batches;
      at = r.offset % (direct_io ? kBlock : kAlign);
    }
    bases[k] = at;
    used = static_cast<size_t>(at + r.bytes);
    ++batches.back().count;
  }
  // No buffer at all when every read goes straight to its target.
  const size_t count = std::min<size_t>(static_cast<size_t>(std::max(buffers, 1)), staged_batches);
  std::vector<Tensor> pool;
  const auto allocating = std::chrono::steady_clock::now();
  for (size_t i = 0; i < count; ++i) {
    absl::StatusOr<Tensor> b = pool_options.allocate ? pool_options.allocate(each)
                                                     : Tensor::Empty({each}, DType::kUInt8);
    if (b.ok() && direct_io) b = BlockAligned(*b);
    if (!b.ok()) return b.status();
    pool.push_back(*std::move(b));
  }
  stats.staging_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                         allocating).count();
  stats.peak_staging_bytes = std::max(stats.peak_staging_bytes, each * static_cast<int64_t>(count));
  // One Reader (and its open files) per reading thread; their counts go to `stats` at the
  // end.
  const size_t threads = static_cast<size_t>(readers);
  std::vector<std::unique_ptr<OpenFiles>> open_files;
  std::vector<std::unique_ptr<Reader>> reader_of;
  for (size_t t = 0; t < threads; ++t) {
    open_files.push_back(std::make_unique<OpenFiles>(
        files, direct_io, std::max<size_t>(kMaxOpenFiles / threads, 1)));
    reader_of.push_back(
        std::make_unique<Reader>(files, plan, name_of, *open_files.back(), stats, direct_io));
  }
  // The first use of a buffer needs no wait; every later one waits for its last consumer's
  // asynchronous work (StagingPool::before_refill). One byte per buffer: buffers are used by
  // several threads, each buffer by one at a time.
  std::vector<char> used(count, 0);
  const auto ready = [&](size_t b) {
    if (b == kNoBuffer || used[b] == 0) {
      if (b != kNoBuffer) used[b] = 1;
      return absl::OkStatus();
    }
    return pool_options.before_refill ? pool_options.before_refill(b) : absl::OkStatus();
  };
  const auto finish = [&](absl::Status status) {
    for (const std::unique_ptr<Reader>& r : reader_of) r->Flush();
    if (pool_options.drain) status.Update(pool_options.drain());
    return status;
  };
  // Reads batch `i` into buffer `b` (a direct batch: to its target) with `reader`; `done` is
  // how many of its reads were read.
  const auto read_batch = [&](Reader& reader, size_t i, size_t b, size_t& done) {
    const Batch& batch = batches[i];
    done = 0;
    SDRT_RETURN_IF_ERROR(ready(batch.direct ? kNoBuffer : b));
    for (; done < batch.count; ++done) {
      const size_t k = batch.first + done;
      uint8_t* dst = batch.direct      ? direct_to[k]
                     : direct_io       ? pool[b].data<uint8_t>()
                                       : pool[b].data<uint8_t>() + bases[k];
      absl::Status s = reader.ReadInto(k, dst);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
  // Consumes the first `done` reads of batch `i`, then reports `read_status`.
  const Tensor none;
  const auto consume_batch = [&](size_t i, size_t b, size_t done, absl::Status read_status) {
    for (size_t j = 0; j < done; ++j) {
      const size_t k = batches[i].first + j;
      const bool staged = !batches[i].direct;
      SDRT_RETURN_IF_ERROR(
          consume(plan.reads[k], staged ? pool[b] : none, bases[k], staged ? b : kNoBuffer));
    }
    return read_status;
  };
  if (count <= 1 && threads == 1) {  // one buffer, or none: read and consume on this thread
    absl::Status s = absl::OkStatus();
    for (size_t i = 0; i < batches.size() && s.ok(); ++i) {
      size_t done = 0;
      absl::Status read_status = read_batch(*reader_of[0], i, 0, done);
      s = consume_batch(i, 0, done, std::move(read_status));
    }
    return finish(s);
  }
  // Reader threads take the batches in order, each with a free buffer (a direct batch needs
  // none), and read them at the same time; this thread consumes them in batch order.
  struct Filled {
    size_t buffer = kNoBuffer;
    size_t done = 0;
    absl::Status status;
    bool ready = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<size_t> free_buffers;
  for (size_t i = 0; i < count; ++i) free_buffers.push_back(i);
  std::vector<Filled> filled(batches.size());
  size_t next = 0;    // the next batch a reader takes
  bool stop = false;  // a read or a consumer failed: take no more batches
  const auto read_loop = [&](Reader& reader) {
    while (true) {
      size_t i = 0;
      size_t b = kNoBuffer;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stop || next >= batches.size() || batches[next].direct || !free_buffers.empty();
        });
        if (stop || next >= batches.size()) return;
        i = next++;
        if (!batches[i].direct) {
          b = free_buffers.front();
          free_buffers.pop_front();
        }
      }
      Filled item{b, 0, absl::OkStatus(), true};
      item.status = OnWorkerThread([&] { return read_batch(reader, i, b, item.done); });
      const bool failed = !item.status.ok();
      {
        std::lock_guard<std::mutex> lock(mu);
        filled[i] = std::move(item);
        if (failed) stop = true;
      }
      cv.notify_all();
      if (failed) return;
    }
  };
  // Threads that start share the batches; none at all is the load's error.
  std::vector<std::thread> pool_threads;
  if (StartThreads(threads, [&](size_t t) { read_loop(*reader_of[t]); }, pool_threads) == 0) {
    return finish(absl::ResourceExhaustedError("no reader thread could be started"));
  }
  absl::Status status = absl::OkStatus();
  for (size_t i = 0; i < batches.size() && status.ok(); ++i) {
    Filled item;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return filled[i].ready; });
      item = std::move(filled[i]);
    }
    status = consume_batch(i, item.buffer, item.done,
                           OutOfMemorySaid(std::move(item.status), "in a reader thread"));
    {
      std::lock_guard<std::mutex> lock(mu);
      if (item.buffer != kNoBuffer) free_buffers.push_back(item.buffer);
      if (!status.ok()) stop = true;
    }
    cv.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  for (std::thread& t : pool_threads) t.join();
  return finish(status);
}

}  // namespace sdrt::internal
