#include "sdrt/tensor/internal/cpu_block_cache.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>

namespace sdrt::internal {
namespace {

// The default limit: 1 GiB, or an eighth of the machine's memory when that is less.
int64_t DefaultLimit() {
  constexpr int64_t kOneGiB = int64_t{1} << 30;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kOneGiB;
  return std::min(kOneGiB, static_cast<int64_t>(pages) * page / 8);
}

}  // namespace

CpuBlockCache& CpuBlockCache::Get() {
  static CpuBlockCache* const cache = new CpuBlockCache();
  return *cache;
}

CpuBlockCache::CpuBlockCache() : limit_(DefaultLimit()) {}

void* CpuBlockCache::Take(int64_t bytes, int64_t* size) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = blocks_.lower_bound(bytes);
  if (it == blocks_.end() || it->first > bytes + bytes / 4) return nullptr;
  void* const data = it->second;
  *size = it->first;
  cached_ -= it->first;
  blocks_.erase(it);
  return data;
}

void CpuBlockCache::Give(void* data, int64_t size) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (size <= limit_) {
      EvictTo(limit_ - size);
      blocks_.emplace(size, data);
      cached_ += size;
      return;
    }
  }
  std::free(data);
}

void CpuBlockCache::EvictTo(int64_t bytes) {
  while (cached_ > bytes && !blocks_.empty()) {
    const auto largest = std::prev(blocks_.end());
    cached_ -= largest->first;
    std::free(largest->second);
    blocks_.erase(largest);
  }
}

int64_t CpuBlockCache::Release() {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t freed = cached_;
  EvictTo(0);
  return freed;
}

int64_t CpuBlockCache::cached_bytes() {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

int64_t CpuBlockCache::limit() {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

void CpuBlockCache::SetLimit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = std::max<int64_t>(0, bytes);
  EvictTo(limit_);
}

}  // namespace sdrt::internal
