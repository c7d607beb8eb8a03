// The kernels of cuda/kernels.h and their launchers.
//
// Design. The strided copy is a memory-bound move:
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
//
// The float conversion is memory-bound too, the same loop over the units of a convert plan
// (tensor/backend/convert_plan.h): a group of elements read in one access of up to 16 bytes
// and written in one, or a single element read and written byte by byte (a head or tail
// off the groups' alignment); each element through float32 by float_cast.h's FloatCodec, the
// host's own conversions. An instance per dtype pair and group size.
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/internal/launch.cuh"
#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/backend/convert_plan.h"
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using internal::kThreads;
using internal::kTile;
using internal::kUnroll;
using internal::Launch;

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

// The unsigned type of an access of N bytes (N a power of two up to 16).
template <int64_t N>
struct Access;
template <>
struct Access<1> {
  using Type = uint8_t;
};
template <>
struct Access<2> {
  using Type = uint16_t;
};
template <>
struct Access<4> {
  using Type = uint32_t;
};
template <>
struct Access<8> {
  using Type = uint64_t;
};
template <>
struct Access<16> {
  using Type = uint4;
};

// Converts the elements of `plan` (From at `src` into To at `dst`; the plan's vector is
// kVector) unit by unit: a group through one access per side, a single element byte by byte.
template <DType From, DType To, int64_t kVector>
__global__ void __launch_bounds__(kThreads)
    ConvertKernel(const internal::ConvertPlan plan, char* __restrict__ dst,
                  const char* __restrict__ src) {
  using In = typename internal::FloatCodec<From>::Bits;
  using Out = typename internal::FloatCodec<To>::Bits;
  using InGroup = typename Access<kVector * sizeof(In)>::Type;
  using OutGroup = typename Access<kVector * sizeof(Out)>::Type;
  const int64_t items = internal::ConvertPlanItems(plan);
  const int64_t step = static_cast<int64_t>(gridDim.x) * kTile;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x; base < items;
       base += step) {
    internal::ConvertItem units[kUnroll];
    In in[kUnroll][kVector];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t a = base + u * kThreads;
      if (a < items) {
        units[u] = internal::ConvertPlanItemAt(plan, a);
        const char* const from = src + units[u].first * static_cast<int64_t>(sizeof(In));
        if (units[u].group) {
          const InGroup g = *reinterpret_cast<const InGroup*>(from);
          memcpy(in[u], &g, sizeof(g));
        } else {
          memcpy(in[u], from, sizeof(In));
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kThreads >= items) continue;
      char* const to = dst + units[u].first * static_cast<int64_t>(sizeof(Out));
      Out out[kVector];
      if (units[u].group) {
#pragma unroll
        for (int64_t k = 0; k < kVector; ++k) out[k] = internal::ConvertFloat<From, To>(in[u][k]);
        OutGroup g;
        memcpy(&g, out, sizeof(g));
        *reinterpret_cast<OutGroup*>(to) = g;
      } else {
        out[0] = internal::ConvertFloat<From, To>(in[u][0]);
        memcpy(to, out, sizeof(Out));
      }
    }
  }
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
      return Launch<StridedCopyKernel<T, IndexT>>(plan.numel, stream, plan, static_cast<T*>(dst),
                                                  static_cast<const T*>(src));
    });
  });
}

absl::Status ConvertFloatsDevice(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                 int64_t count, StreamHandle stream) {
  constexpr absl::string_view kOp = "ConvertFloatsDevice";
  if (CastKindOf(src_dtype) != CastKind::kFloat || CastKindOf(dst_dtype) != CastKind::kFloat) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": no conversion from ", DTypeName(src_dtype), " to ", DTypeName(dst_dtype),
        "; both must be float64, float32, bfloat16, float16 or a float8 of the cast column"));
  }
  const int64_t src_bytes = ElementBits(src_dtype) / 8, dst_bytes = ElementBits(dst_dtype) / 8;
  if (count < 0 || count > std::numeric_limits<int64_t>::max() / std::max(src_bytes, dst_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": count ", count, " is negative or spans more than 2^63 - 1 bytes"));
  }
  if (count == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": null ", dst == nullptr ? "dst" : "src", " for ", count, " elements"));
  }
  if (src_dtype == dst_dtype) {
    return SDRT_CUDA_STATUS(cudaMemcpyAsync(dst, src, static_cast<size_t>(count * src_bytes),
                                            cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
  }
  const internal::ConvertPlan plan =
      internal::BuildConvertPlan(reinterpret_cast<uintptr_t>(dst), dst_bytes,
                                 reinterpret_cast<uintptr_t>(src), src_bytes, count);
  const int64_t units = internal::ConvertPlanItems(plan);
  char* const to = static_cast<char*>(dst);
  const char* const from = static_cast<const char*>(src);
  // The dtypes were checked above: a copy of a status made once (no allocation per call).
  static const absl::Status* const kNoKernel =
      new absl::Status(absl::InternalError("ConvertFloatsDevice: no kernel for these dtypes"));
  const absl::Status& unreachable = *kNoKernel;
  return internal::VisitFloatDType(src_dtype, unreachable, [&](auto in) {
    return internal::VisitFloatDType(dst_dtype, unreachable, [&](auto out) -> absl::Status {
      constexpr DType kFrom = decltype(in)::value, kTo = decltype(out)::value;
      if constexpr (kFrom == kTo) {
        return unreachable;  // copied above
      } else {
        constexpr int64_t kGroup =
            internal::GroupElements(sizeof(typename internal::FloatCodec<kFrom>::Bits),
                                    sizeof(typename internal::FloatCodec<kTo>::Bits));
        if (plan.vector == kGroup) {
          return Launch<ConvertKernel<kFrom, kTo, kGroup>>(units, stream, plan, to, from);
        }
        return Launch<ConvertKernel<kFrom, kTo, 1>>(units, stream, plan, to, from);
      }
    });
  });
}

}  // namespace sdrt
