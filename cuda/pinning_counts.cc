// HostPinningCountsSoFar (cuda/runtime.h) and its counters (pinning_counts.h): built with and
// without CUDA (without it nothing counts, so both stay 0).
#include "sdrt/cuda/pinning_counts.h"

#include <atomic>
#include <cstdint>

#include "sdrt/cuda/runtime.h"

namespace sdrt {
namespace {

std::atomic<int64_t> registrations{0};
std::atomic<int64_t> allocations{0};

}  // namespace

namespace internal {

void CountHostRegistration() { registrations.fetch_add(1, std::memory_order_relaxed); }
void CountPinnedAllocation() { allocations.fetch_add(1, std::memory_order_relaxed); }

}  // namespace internal

HostPinningCounts HostPinningCountsSoFar() {
  HostPinningCounts counts;
  counts.registrations = registrations.load(std::memory_order_relaxed);
  counts.allocations = allocations.load(std::memory_order_relaxed);
  return counts;
}

}  // namespace sdrt
