// BufferCache (core/distributed/internal/load/buffer_cache.h), the pool LoadStateDict's
// pinned staging buffers come from, with a CPU allocator: a buffer given back serves the
// next Take of its device and size, the kept bytes stay under the cap (the oldest freed
// first), and the counters say which Take allocated.
#include "sdrt/core/distributed/internal/load/buffer_cache.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace sdrt::internal {
namespace {

// A cache of CPU buffers that counts its allocator's calls (atomically: the cache calls it
// outside its lock, from every thread that takes).
struct Counted {
  explicit Counted(int64_t max_kept_bytes)
      : cache([this](int64_t nbytes, int) {
          ++allocated;
          return Storage::AllocateCpu(nbytes);
        },
        max_kept_bytes) {}
  std::atomic<int64_t> allocated{0};
  BufferCache cache;
};

TEST(BufferCacheTest, AGivenBufferServesTheNextTakeOfItsDeviceAndSize) {
  Counted c(1000);
  std::shared_ptr<Storage> a = *c.cache.Take(0, 100);
  void* const data = a->data();
  c.cache.Give(0, std::move(a));
  EXPECT_EQ(c.cache.counters().kept_buffers, 1);
  EXPECT_EQ(c.cache.counters().kept_bytes, 100);
  std::shared_ptr<Storage> again = *c.cache.Take(0, 100);
  EXPECT_EQ(again->data(), data);
  EXPECT_EQ(c.cache.counters().reuses, 1);
  EXPECT_EQ(c.cache.counters().kept_bytes, 0);
  c.cache.Give(0, std::move(again));
  // Another device, a size above the kept one, one under half of it: new buffers.
  const std::shared_ptr<Storage> other_device = *c.cache.Take(1, 100);
  const std::shared_ptr<Storage> larger = *c.cache.Take(0, 101);
  const std::shared_ptr<Storage> much_smaller = *c.cache.Take(0, 49);
  EXPECT_EQ(c.cache.counters().reuses, 1);
  EXPECT_EQ(c.allocated, 4);
  EXPECT_EQ(c.cache.counters().allocations, c.allocated);
  // Half of it or more: the kept one.
  const std::shared_ptr<Storage> smaller = *c.cache.Take(0, 50);
  EXPECT_EQ(smaller->data(), data);
  EXPECT_EQ(c.cache.counters().reuses, 2);
  EXPECT_EQ(c.allocated, 4);
}

TEST(BufferCacheTest, TakesTheSmallestThatFits) {
  Counted c(1000);
  std::shared_ptr<Storage> big = *c.cache.Take(0, 190);
  std::shared_ptr<Storage> small = *c.cache.Take(0, 120);
  void* const small_data = small->data();
  c.cache.Give(0, std::move(big));
  c.cache.Give(0, std::move(small));
  EXPECT_EQ((*c.cache.Take(0, 100))->data(), small_data);
}

TEST(BufferCacheTest, KeepsAtMostTheCapTheOldestFreedFirst) {
  Counted c(1000);
  std::vector<std::weak_ptr<Storage>> given;
  for (int i = 0; i < 3; ++i) {
    std::shared_ptr<Storage> b = *c.cache.Take(0, 400);
    given.push_back(b);
    c.cache.Give(0, std::move(b));
  }
  // The three Takes reused the one buffer: allocate three at once instead.
  EXPECT_EQ(c.allocated, 1);
  std::vector<std::shared_ptr<Storage>> held;
  for (int i = 0; i < 3; ++i) held.push_back(*c.cache.Take(0, 400));
  given.clear();
  for (std::shared_ptr<Storage>& b : held) {
    given.push_back(b);
    c.cache.Give(0, std::move(b));
  }
  const BufferCache::Counters counters = c.cache.counters();
  EXPECT_LE(counters.kept_bytes, 1000);
  EXPECT_EQ(counters.kept_buffers, 2);
  EXPECT_TRUE(given[0].expired());  // the oldest given back: freed
  EXPECT_FALSE(given[1].expired());
  EXPECT_FALSE(given[2].expired());
  // Larger than the cap: freed at once, nothing evicted for it.
  std::shared_ptr<Storage> huge = *c.cache.Take(0, 2000);
  const std::weak_ptr<Storage> huge_weak = huge;
  c.cache.Give(0, std::move(huge));
  EXPECT_TRUE(huge_weak.expired());
  EXPECT_EQ(c.cache.counters().kept_buffers, 2);
  // A cap of 0 keeps nothing.
  Counted none(0);
  none.cache.Give(0, *none.cache.Take(0, 1));
  EXPECT_EQ(none.cache.counters().kept_buffers, 0);
  EXPECT_EQ(none.cache.counters().kept_bytes, 0);
}

TEST(BufferCacheTest, AllocatorErrorsPassThroughUncounted) {
  BufferCache cache(
      [](int64_t, int) -> absl::StatusOr<std::shared_ptr<Storage>> {
        return absl::ResourceExhaustedError("no pinned memory");
      },
      1000);
  const absl::StatusOr<std::shared_ptr<Storage>> b = cache.Take(0, 10);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.counters().allocations, 0);
}

TEST(BufferCacheTest, ThreadsTakeAndGiveConcurrently) {
  Counted c(4096);
  constexpr int kThreads = 4;
  constexpr int kRounds = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < kRounds; ++i) {
        std::shared_ptr<Storage> b = *c.cache.Take(t % 2, 256 + 64 * (i % 3));
        static_cast<uint8_t*>(b->data())[0] = static_cast<uint8_t>(i);
        c.cache.Give(t % 2, std::move(b));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const BufferCache::Counters counters = c.cache.counters();
  EXPECT_EQ(counters.allocations + counters.reuses, kThreads * kRounds);
  EXPECT_EQ(counters.allocations, c.allocated);
  EXPECT_LE(counters.kept_bytes, 4096);
  EXPECT_GT(counters.reuses, 0);
}

}  // namespace
}  // namespace sdrt::internal
