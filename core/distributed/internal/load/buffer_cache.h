// Buffers kept from one call to the next: LoadStateDict's pinned staging buffers
// (device_staging.h) cost a cudaHostAlloc each (the pages are locked one by one) and a
// cudaFreeHost at the end of every call; a second load into the same device takes the
// buffers the first one gave back. Generic over the allocator, so that a test checks the
// reuse with CPU memory. Bounded: at most `max_kept_bytes` are kept, the buffers given
// back longest ago freed first. Thread-safe. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_BUFFER_CACHE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_BUFFER_CACHE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
#include "sdrt/tensor/storage.h"

namespace sdrt::internal {

class BufferCache {
 public:
  // Allocates a buffer of `nbytes` for device `device` (the key: a CUDA ordinal; any int
  // for another allocator).
  using Allocator =
      std::function<absl::StatusOr<std::shared_ptr<Storage>>(int64_t nbytes, int device)>;

  struct Counters {
    int64_t allocations = 0;  // Take calls the allocator served
    int64_t reuses = 0;       // Take calls a kept buffer served
    int64_t kept_buffers = 0;
    int64_t kept_bytes = 0;   // <= max_kept_bytes
  };

  // `max_kept_bytes` >= 0 (0 keeps nothing).
  BufferCache(Allocator allocate, int64_t max_kept_bytes)
      : allocate_(std::move(allocate)), max_kept_bytes_(max_kept_bytes) {}

  // A buffer of at least `nbytes` (> 0) for `device`: the smallest kept one of `device` of
  // nbytes to 2 x nbytes bytes (so a small load does not hold a large buffer), taken out of
  // the cache, else a new one from the allocator (its error as it is). The caller owns it.
  absl::StatusOr<std::shared_ptr<Storage>> Take(int device, int64_t nbytes);

  // Keeps `buffer` for a later Take on `device`. The caller passes the last reference, and
  // nothing may use the memory any more (asynchronous work on it complete). The buffers
  // given back longest ago are freed while more than max_kept_bytes are kept (a buffer
  // larger than that is freed at once). A null or empty buffer is ignored.
  void Give(int device, std::shared_ptr<Storage> buffer);

  Counters counters() const;

 private:
  struct Kept {
    int device = 0;
    std::shared_ptr<Storage> buffer;
  };
  const Allocator allocate_;
  const int64_t max_kept_bytes_;
  mutable std::mutex mu_;
  std::deque<Kept> kept_;  // guarded by mu_; the oldest first
  Counters counters_;      // guarded by mu_
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_BUFFER_CACHE_H_
