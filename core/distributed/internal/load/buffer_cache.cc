// BufferCache (buffer_cache.h).
#include "sdrt/core/distributed/internal/load/buffer_cache.h"

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace sdrt::internal {

absl::StatusOr<std::shared_ptr<Storage>> BufferCache::Take(int device, int64_t nbytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = kept_.size();
    for (size_t i = 0; i < kept_.size(); ++i) {
      const int64_t size = kept_[i].buffer->nbytes();
      // nbytes <= size <= 2 x nbytes, written so that nothing overflows.
      if (kept_[i].device != device || size < nbytes || size - nbytes > nbytes) continue;
      if (best == kept_.size() || size < kept_[best].buffer->nbytes()) best = i;
    }
    if (best < kept_.size()) {
      std::shared_ptr<Storage> buffer = std::move(kept_[best].buffer);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(best));
      counters_.kept_bytes -= buffer->nbytes();
      --counters_.kept_buffers;
      ++counters_.reuses;
      return buffer;
    }
  }
  // Allocated outside the lock: a page-locked allocation takes long, and other devices'
  // calls need not wait for it.
  absl::StatusOr<std::shared_ptr<Storage>> buffer = allocate_(nbytes, device);
  if (buffer.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++counters_.allocations;
  }
  return buffer;
}

void BufferCache::Give(int device, std::shared_ptr<Storage> buffer) {
  // Too large to keep: freed here (the last reference goes), as an evicted one below.
  if (buffer == nullptr || buffer->nbytes() <= 0 || buffer->nbytes() > max_kept_bytes_) return;
  const int64_t size = buffer->nbytes();
  std::vector<std::shared_ptr<Storage>> freed;  // released after the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Room first (size <= max_kept_bytes_, so nothing below overflows), the oldest out.
    while (counters_.kept_bytes > max_kept_bytes_ - size) {
      counters_.kept_bytes -= kept_.front().buffer->nbytes();
      --counters_.kept_buffers;
      freed.push_back(std::move(kept_.front().buffer));
      kept_.pop_front();
    }
    counters_.kept_bytes += size;
    ++counters_.kept_buffers;
    kept_.push_back(Kept{device, std::move(buffer)});
  }
}

BufferCache::Counters BufferCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace sdrt::internal
