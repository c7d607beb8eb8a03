// The strided copy kernel of cuda/kernels.h and its launcher.
//
// Design. The copy is a memory-bound move:
//   - a 1-D grid-stride loop over accesses of W bytes (W = 1, 2, 4, 8 or 16, chosen on
//     the host from the addresses and strides; element types never matter), on a
//     persistent grid of as many blocks as fit on the device at once (no grid.y limits);
//   - kUnroll accesses per thread per iteration, all loads issued before the first
//     store, so that several independent loads are in flight per thread;
//   - offsets from the same index functions the host paths run (tensor/backend/index_math.h),
//     with the div/mod in 32 bits when the access count fits in int32 (several times
//     cheaper than 64-bit division on the GPU) and the offsets in int64 always.
// Validation and planning are PrepareStridedCopy's (tensor/backend/strided_copy.h), shared
// with the host path, so the launcher only picks the template instance and launches.
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
// Accesses one block covers per iteration.
constexpr int64_t kTile = int64_t{kThreads} * kUnroll;

// ---------------------------------------------------------------------------------
// Kernels. In each, `base` is this thread's first access of an iteration; its kUnroll
// accesses are kThreads apart, so a warp's accesses are adjacent (coalesced) wherever
// the layout is. IndexT is uint32_t when every access index fits in int32 (then
// base + step cannot wrap), else int64_t.

template <typename T, typename IndexT>
__global__ void __launch_bounds__(kThreads)
    StridedCopyKernel(const internal::CopyPlan plan, T* __restrict__ dst,
                      const T* __restrict__ src) {
  const IndexT numel = static_cast<IndexT>(plan.numel);
  const IndexT step = static_cast<IndexT>(gridDim.x) * static_cast<IndexT>(kTile);
  for (IndexT base = static_cast<IndexT>(blockIdx.x) * static_cast<IndexT>(kTile) + threadIdx.x;
       base < numel; base += step) {
    internal::CopyOffsets offsets[kUnroll];
    T values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const IndexT a = base + static_cast<IndexT>(u * kThreads);
      if (a < numel) {
        offsets[u] = internal::CopyPlanOffsets<IndexT>(plan, a);
        values[u] = src[offsets[u].src];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + static_cast<IndexT>(u * kThreads) < numel) dst[offsets[u].dst] = values[u];
    }
  }
}

// ---------------------------------------------------------------------------------
// Launch helpers.

// The blocks of `kernel` that fit on `device` at once (multiprocessors times resident
// blocks per multiprocessor, at least one per multiprocessor). Both queries cost
// microseconds of host time, more than a small copy's launch, so each kernel instance
// remembers the answer per device (devices beyond kCachedDevices are asked every time).
// Racing first calls store the same value.
template <typename T, typename IndexT>
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
      &blocks_per_sm, reinterpret_cast<const void*>(StridedCopyKernel<T, IndexT>), kThreads, 0));
  const int64_t blocks = int64_t{std::max(sms, 1)} * std::max(blocks_per_sm, 1);
  if (cacheable) cached[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

// Launches StridedCopyKernel<T, IndexT> over plan.numel accesses on `stream`. The grid
// is persistent: enough blocks to give each thread one iteration, capped at the blocks
// that fit on the current device at once (the loops are grid-stride). The launch's
// status is cudaLaunchKernelEx's own return value, never cudaGetLastError(), which would
// also report whatever error an earlier, unrelated call left behind.
template <typename T, typename IndexT>
absl::Status Launch(const internal::CopyPlan& plan, T* dst, const T* src, StreamHandle stream) {
  int device = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  SDRT_ASSIGN_OR_RETURN(const int64_t resident, (ResidentBlocks<T, IndexT>(device)));
  const int64_t blocks = std::min<int64_t>((plan.numel + kTile - 1) / kTile, resident);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = static_cast<cudaStream_t>(stream);
  return SDRT_CUDA_STATUS(
      cudaLaunchKernelEx(&config, StridedCopyKernel<T, IndexT>, plan, dst, src));
}

// Calls launch(T{}) with T the unsigned type of `width` bytes (uint4 for 16).
template <typename Launch>
absl::Status DispatchWidth(int64_t width, Launch&& launch) {
  switch (width) {
    case 1:
      return launch(uint8_t{});
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    case 8:
      return launch(uint64_t{});
    case 16:
      return launch(uint4{});
  }
  return absl::InternalError(absl::StrCat("copy kernels: no access type of width ", width));
}

// Calls launch(IndexT{}) with the index type for `accesses` accesses (see the kernels).
template <typename Launch>
absl::Status DispatchIndex(int64_t accesses, Launch&& launch) {
  if (accesses <= std::numeric_limits<int32_t>::max()) return launch(uint32_t{});
  return launch(int64_t{});
}

}  // namespace

absl::Status StridedCopyDevice(void* dst, const void* src, int64_t elem_size,
                               absl::Span<const int64_t> sizes,
                               absl::Span<const int64_t> dst_strides,
                               absl::Span<const int64_t> src_strides, StreamHandle stream) {
  SDRT_ASSIGN_OR_RETURN(const internal::CopyPlan plan,
                        internal::PrepareStridedCopy("StridedCopyDevice", dst, src, elem_size,
                                                     sizes, dst_strides, src_strides));
  if (plan.numel == 0) return absl::OkStatus();
  return DispatchWidth(plan.width, [&](auto width_tag) {
    using T = decltype(width_tag);
    return DispatchIndex(plan.numel, [&](auto index_tag) {
      using IndexT = decltype(index_tag);
      return Launch<T, IndexT>(plan, static_cast<T*>(dst), static_cast<const T*>(src), stream);
    });
  });
}

}  // namespace sdrt
