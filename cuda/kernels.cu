// The copy kernels of cuda/kernels.h and their launchers.
//
// Design. All three kernels are memory-bound moves, so they share one shape:
//   - a 1-D grid-stride loop over accesses of W bytes (W = 1, 2, 4, 8 or 16, chosen on
//     the host from the addresses and strides; element types never matter), on a
//     persistent grid of as many blocks as fit on the device at once (no grid.y limits);
//   - kUnroll accesses per thread per iteration, all loads issued before the first
//     store, so that several independent loads are in flight per thread;
//   - offsets from the same index functions the host paths run (tensor/backend/index_math.h),
//     with the div/mod in 32 bits when the access count fits in int32 (several times
//     cheaper than 64-bit division on the GPU) and the offsets in int64 always.
// Validation and planning are tensor/backend/copy_validation.h's, shared with the host
// paths, so a launcher only picks the template instance and launches.
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/backend/copy_validation.h"
#include "sdrt/tensor/backend/index_math.h"

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
    StridedCopyKernel(const CopyPlan plan, T* __restrict__ dst, const T* __restrict__ src) {
  const IndexT numel = static_cast<IndexT>(plan.numel);
  const IndexT step = static_cast<IndexT>(gridDim.x) * static_cast<IndexT>(kTile);
  for (IndexT base = static_cast<IndexT>(blockIdx.x) * static_cast<IndexT>(kTile) + threadIdx.x;
       base < numel; base += step) {
    CopyOffsets offsets[kUnroll];
    T values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const IndexT a = base + static_cast<IndexT>(u * kThreads);
      if (a < numel) {
        offsets[u] = CopyPlanOffsets<IndexT>(plan, a);
        values[u] = src[offsets[u].src];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + static_cast<IndexT>(u * kThreads) < numel) dst[offsets[u].dst] = values[u];
    }
  }
}

// Unit i of W bytes covers dst bytes [i * W, i * W + W). Units wholly below src_bytes
// are copied and units wholly inside [src_bytes, dst_bytes) are zeroed, both as single
// accesses; the at most two units straddling src_bytes or dst_bytes go byte by byte, so
// W needs to divide only the two addresses, not the byte counts.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    PadKernel(char* __restrict__ dst, const char* __restrict__ src, int64_t dst_bytes,
              int64_t src_bytes) {
  constexpr int64_t W = sizeof(T);
  const int64_t copy_units = src_bytes / W;
  const int64_t units = (dst_bytes + W - 1) / W;
  T* dst_units = reinterpret_cast<T*>(dst);
  const T* src_units = reinterpret_cast<const T*>(src);
  for (int64_t base = blockIdx.x * kTile + threadIdx.x; base < units; base += gridDim.x * kTile) {
    T values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads;
      if (i < copy_units) values[u] = src_units[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kThreads;
      if (i < copy_units) {
        dst_units[i] = values[u];
      } else if (i < units) {
        const int64_t begin = i * W;
        const int64_t end = begin + W;
        if (begin >= src_bytes && end <= dst_bytes) {
          dst_units[i] = T{};
        } else {
          for (int64_t b = begin; b < end && b < dst_bytes; ++b) {
            dst[b] = b < src_bytes ? src[b] : 0;
          }
        }
      }
    }
  }
}

// Full access a (row-major over [pre, n, post]) reads gathered[UnshardSourceIndex(a)]:
// the writes are sequential and the reads are runs of `post` accesses.
template <typename T, typename IndexT>
__global__ void __launch_bounds__(kThreads)
    UnshardKernel(const UnshardPlan plan, T* __restrict__ full, const T* __restrict__ gathered) {
  const IndexT numel = static_cast<IndexT>(plan.pre * plan.n * plan.post);
  const IndexT step = static_cast<IndexT>(gridDim.x) * static_cast<IndexT>(kTile);
  for (IndexT base = static_cast<IndexT>(blockIdx.x) * static_cast<IndexT>(kTile) + threadIdx.x;
       base < numel; base += step) {
    T values[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const IndexT a = base + static_cast<IndexT>(u * kThreads);
      if (a < numel) values[u] = gathered[UnshardSourceIndex<IndexT>(plan, a)];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const IndexT a = base + static_cast<IndexT>(u * kThreads);
      if (a < numel) full[a] = values[u];
    }
  }
}

// ---------------------------------------------------------------------------------
// Launch helpers.

// Launches `kernel` over `accesses` accesses on `stream` and checks the launch. The grid
// is persistent: enough blocks to give each thread one iteration, capped at the blocks
// that fit on the current device at once (the loops are grid-stride).
template <typename... Params, typename... Args>
absl::Status Launch(void (*kernel)(Params...), int64_t accesses, StreamHandle stream,
                    Args... args) {
  int device = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  int sms = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int blocks_per_sm = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks_per_sm, reinterpret_cast<const void*>(kernel), kThreads, 0));
  const int64_t blocks =
      std::min<int64_t>((accesses + kTile - 1) / kTile, int64_t{sms} * std::max(blocks_per_sm, 1));
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      args...);
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
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
  absl::StatusOr<CopyPlan> plan = internal::PrepareStridedCopy(
      "StridedCopyDevice", dst, src, elem_size, sizes, dst_strides, src_strides);
  if (!plan.ok()) return plan.status();
  if (plan->numel == 0) return absl::OkStatus();
  return DispatchWidth(plan->width, [&](auto width_tag) {
    using T = decltype(width_tag);
    return DispatchIndex(plan->numel, [&](auto index_tag) {
      using IndexT = decltype(index_tag);
      return Launch(StridedCopyKernel<T, IndexT>, plan->numel, stream, *plan, static_cast<T*>(dst),
                    static_cast<const T*>(src));
    });
  });
}

absl::Status PadDevice(void* dst, int64_t dst_bytes, const void* src, int64_t src_bytes,
                       StreamHandle stream) {
  absl::Status status = internal::ValidatePad("PadDevice", dst, dst_bytes, src, src_bytes);
  if (!status.ok()) return status;
  if (dst_bytes == 0) return absl::OkStatus();
  const int64_t width =
      WidestAccessWidth(reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src));
  return DispatchWidth(width, [&](auto width_tag) {
    using T = decltype(width_tag);
    return Launch(PadKernel<T>, (dst_bytes + width - 1) / width, stream, static_cast<char*>(dst),
                  static_cast<const char*>(src), dst_bytes, src_bytes);
  });
}

absl::Status UnshardDevice(void* full, const void* gathered, int64_t elem_size,
                           absl::Span<const int64_t> full_shape, int dim, int64_t num_chunks,
                           StreamHandle stream) {
  absl::StatusOr<UnshardPlan> plan = internal::PrepareUnshard(
      "UnshardDevice", full, gathered, elem_size, full_shape, dim, num_chunks);
  if (!plan.ok()) return plan.status();
  const int64_t numel = plan->pre * plan->n * plan->post;
  if (numel == 0) return absl::OkStatus();
  return DispatchWidth(plan->width, [&](auto width_tag) {
    using T = decltype(width_tag);
    return DispatchIndex(numel, [&](auto index_tag) {
      using IndexT = decltype(index_tag);
      return Launch(UnshardKernel<T, IndexT>, numel, stream, *plan, static_cast<T*>(full),
                    static_cast<const T*>(gathered));
    });
  });
}

}  // namespace sdrt
