// The cache behind Storage::AllocateCpu's large blocks: CPU memory of 2 MiB and more that
// a storage released is kept (up to a limit) and handed to the next allocation that fits,
// so a second call of the same shape (a gather every training step, a weight sync every RL
// step) writes into pages that are already mapped instead of paying a page fault per page
// again. Without it every large result and bucket is fresh memory each call: first
// touching it cost more than the copies that fill it (bench/RESULTS.md). Not public API;
// the limit and the release are (tensor/storage.h).
#ifndef SDRT_TENSOR_INTERNAL_CPU_BLOCK_CACHE_H_
#define SDRT_TENSOR_INTERNAL_CPU_BLOCK_CACHE_H_

#include <cstdint>
#include <map>
#include <mutex>

namespace sdrt::internal {

class CpuBlockCache {
 public:
  // The process's cache (never destroyed: blocks it holds stay reachable).
  static CpuBlockCache& Get();

  // A cached block of at least `bytes` and at most 5/4 of it (the smallest such), taken
  // out of the cache with its size in *size; nullptr when none fits.
  void* Take(int64_t bytes, int64_t* size);
  // Keeps the block `data` of `size` bytes (from std::aligned_alloc) for reuse when it
  // fits under the limit, evicting the largest cached blocks first to make room; frees it
  // otherwise.
  void Give(void* data, int64_t size);
  // Frees every cached block; returns the bytes freed.
  int64_t Release();
  int64_t cached_bytes();
  int64_t limit();
  // Sets the most bytes kept (0 disables the cache) and frees what exceeds it.
  void SetLimit(int64_t bytes);

 private:
  CpuBlockCache();
  void EvictTo(int64_t bytes);  // mutex_ held

  std::mutex mutex_;
  std::multimap<int64_t, void*> blocks_;  // by size
  int64_t cached_ = 0;
  int64_t limit_;
};

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_INTERNAL_CPU_BLOCK_CACHE_H_
