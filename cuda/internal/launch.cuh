// How cuda/'s grid-stride kernels are launched (kernels.cu, fp8_kernels.cu): blocks of
// kThreads threads, each thread kUnroll units per iteration, and a persistent grid of as many
// blocks as fit on the device at once. Private to cuda/: CUDA source only.
#ifndef SDRT_CUDA_INTERNAL_LAUNCH_CUH_
#define SDRT_CUDA_INTERNAL_LAUNCH_CUH_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

inline constexpr int kThreads = 256;
inline constexpr int kUnroll = 4;
// Units one block covers per iteration.
inline constexpr int64_t kTile = int64_t{kThreads} * kUnroll;

// The blocks of `kKernel` that fit on `device` at once (multiprocessors times resident
// blocks per multiprocessor, at least one per multiprocessor). Both queries cost
// microseconds of host time, more than a small copy's launch, so each kernel instance
// remembers the answer per device (devices beyond kCachedDevices are asked every time).
// Racing first calls store the same value.
template <auto kKernel>
absl::StatusOr<int64_t> ResidentBlocks(int device) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int64_t> cached[kCachedDevices] = {};
  const bool cacheable = device >= 0 && device < kCachedDevices;
  if (cacheable) {
    const int64_t known = cached[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int sms = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int blocks_per_sm = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks_per_sm, reinterpret_cast<const void*>(kKernel), kThreads, 0));
  const int64_t blocks = int64_t{std::max(sms, 1)} * std::max(blocks_per_sm, 1);
  if (cacheable) cached[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

// Launches `kKernel` (one of the grid-stride kernels above) over `units` units of work (kUnroll
// per thread per iteration) with `args`, on `stream`. The grid is persistent: enough blocks
// to give each thread one iteration, capped at the blocks that fit on the current device at
// once. The launch's status is cudaLaunchKernelEx's own return value, never
// cudaGetLastError(), which would also report whatever error an earlier, unrelated call
// left behind.
template <auto kKernel, typename... Args>
absl::Status Launch(int64_t units, StreamHandle stream, Args... args) {
  int device = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  SDRT_ASSIGN_OR_RETURN(const int64_t resident, ResidentBlocks<kKernel>(device));
  const int64_t blocks = std::min<int64_t>((units + kTile - 1) / kTile, resident);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = static_cast<cudaStream_t>(stream);
  return SDRT_CUDA_STATUS(cudaLaunchKernelEx(&config, kKernel, args...));
}

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_INTERNAL_LAUNCH_CUH_
