// The kernels of cuda/fp8_kernels.h and their launcher.
//
// Design. Quantizing and dequantizing are element-wise and memory-bound: a grid-stride loop
// over the box's elements (row-major, so a warp reads adjacent elements of a row), each
// element's scale read by its tile's index (the same few scales for a whole row of a tile:
// they stay in L1). The amax is a reduction per tile: one thread block per chunk (the box's
// part in one tile, at most tile x tile elements; a warp per row, its lanes along the row),
// a warp-shuffle max, a shared-memory max over the warps and one atomicMax of the chunk's
// bits into its grid entry. A float's bits
// with the sign cleared order as its magnitude, so integer max is float max; every NaN is
// stored as kNanAmaxBits, as the host does, so that all ranks agree bit for bit.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/fp8_kernels.h"
#include "sdrt/cuda/internal/launch.cuh"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using internal::BoxTileIndex;
using internal::ChunkBegin;
using internal::ChunkCount;
using internal::ChunkEdge;
using internal::FloatCodec;
using internal::kThreads;
using internal::Launch;

constexpr int kWarps = kThreads / 32;

// The grid entries raised by one thread block per chunk (see the file comment).
template <DType F>
__global__ void __launch_bounds__(kThreads) TileAmaxKernel(const Fp8BoxOp op) {
  using Bits = typename FloatCodec<F>::Bits;
  const Bits* const src = static_cast<const Bits*>(op.src);
  int32_t* const grid = static_cast<int32_t*>(op.dst);
  const int64_t edge = ChunkEdge(op.tile);
  const int64_t row_origin = op.tile > 0 ? op.row0 : 0;
  const int64_t col_origin = op.tile > 0 ? op.col0 : 0;
  const int64_t chunk_cols = ChunkCount(col_origin, op.cols, edge);
  const int64_t chunks = ChunkCount(row_origin, op.rows, edge) * chunk_cols;
  __shared__ uint32_t warp_max[kWarps];
  for (int64_t k = blockIdx.x; k < chunks; k += gridDim.x) {
    const int64_t i = k / chunk_cols, j = k % chunk_cols;
    const int64_t r0 = ChunkBegin(row_origin, op.rows, edge, i);
    const int64_t r1 = ChunkBegin(row_origin, op.rows, edge, i + 1);
    const int64_t c0 = ChunkBegin(col_origin, op.cols, edge, j);
    const int64_t c1 = ChunkBegin(col_origin, op.cols, edge, j + 1);
    // A warp per row (the block's warps take every kWarps-th row), its lanes along the row:
    // adjacent reads, no division per element.
    uint32_t m = 0;
    for (int64_t r = r0 + (threadIdx.x >> 5); r < r1; r += kWarps) {
      const Bits* const row = src + r * op.src_row_stride;
      for (int64_t c = c0 + (threadIdx.x & 31); c < c1; c += 32) {
        uint32_t bits = internal::FloatBits(fabsf(FloatCodec<F>::Widen(row[c])));
        if (bits > 0x7f800000u) bits = static_cast<uint32_t>(internal::kNanAmaxBits);
        m = max(m, bits);
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
    }
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t b = 0;
      for (int w = 0; w < kWarps; ++w) b = max(b, warp_max[w]);
      if (b > 0) {
        atomicMax(grid + BoxTileIndex(op.row0, op.col0, op.tile, op.grid_cols, r0, c0),
                  static_cast<int>(b));
      }
    }
    __syncthreads();  // warp_max is rewritten by the next chunk
  }
}

// codes[r, c] = x[r, c] / scale of its tile, written dense.
template <DType F, DType Q>
__global__ void __launch_bounds__(kThreads) QuantizeKernel(const Fp8BoxOp op) {
  using In = typename FloatCodec<F>::Bits;
  using Out = typename FloatCodec<Q>::Bits;
  const In* const src = static_cast<const In*>(op.src);
  Out* const dst = static_cast<Out*>(op.dst);
  const float* const scales = static_cast<const float*>(op.scales);
  const int64_t n = op.rows * op.cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < n; e += step) {
    const int64_t r = e / op.cols, c = e % op.cols;
    const float scale = scales[BoxTileIndex(op.row0, op.col0, op.tile, op.grid_cols, r, c)];
    dst[e] = FloatCodec<Q>::Narrow(FloatCodec<F>::Widen(src[r * op.src_row_stride + c]) / scale);
  }
}

// out[r, c] = q[r, c] * scale of its tile (float32 or e8m0 scales), written dense.
template <DType Q, DType T, DType S>
__global__ void __launch_bounds__(kThreads) DequantizeKernel(const Fp8BoxOp op) {
  using In = typename FloatCodec<Q>::Bits;
  using Out = typename FloatCodec<T>::Bits;
  using Scale = typename FloatCodec<S>::Bits;
  const In* const src = static_cast<const In*>(op.src);
  Out* const dst = static_cast<Out*>(op.dst);
  const Scale* const scales = static_cast<const Scale*>(op.scales);
  const int64_t n = op.rows * op.cols;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; e < n; e += step) {
    const int64_t r = e / op.cols, c = e % op.cols;
    const float scale = FloatCodec<S>::Widen(
        scales[BoxTileIndex(op.row0, op.col0, op.tile, op.grid_cols, r, c)]);
    dst[e] = FloatCodec<T>::Narrow(FloatCodec<Q>::Widen(src[r * op.src_row_stride + c]) * scale);
  }
}

}  // namespace

absl::Status Fp8BoxDevice(const Fp8BoxOp& op, StreamHandle stream) {
  SDRT_RETURN_IF_ERROR(ValidateFp8Box(op, "Fp8BoxDevice"));
  if (op.rows == 0 || op.cols == 0) return absl::OkStatus();
  static const absl::Status* const kNoKernel =
      new absl::Status(absl::InternalError("Fp8BoxDevice: no kernel for these dtypes"));
  const absl::Status& unreachable = *kNoKernel;
  const int64_t elements = op.rows * op.cols;
  switch (op.kind) {
    case Fp8BoxOp::Kind::kTileAmax: {
      const int64_t edge = ChunkEdge(op.tile);
      const int64_t chunks = ChunkCount(op.tile > 0 ? op.row0 : 0, op.rows, edge) *
                             ChunkCount(op.tile > 0 ? op.col0 : 0, op.cols, edge);
      // One block per chunk (Launch counts internal::kTile units a block), the grid capped
      // at the blocks resident at once.
      const int64_t units = std::min<int64_t>(chunks, int64_t{1} << 40) * internal::kTile;
      return internal::VisitFloatDType(op.src_dtype, unreachable, [&](auto f) -> absl::Status {
        constexpr DType F = decltype(f)::value;
        if constexpr (!internal::IsFp8Wide(F)) {
          return unreachable;
        } else {
          return Launch<TileAmaxKernel<F>>(units, stream, op);
        }
      });
    }
    case Fp8BoxOp::Kind::kQuantize:
      return internal::VisitFloatDType(op.src_dtype, unreachable, [&](auto f) -> absl::Status {
        constexpr DType F = decltype(f)::value;
        return internal::VisitFloatDType(op.dst_dtype, unreachable, [&](auto q) -> absl::Status {
          constexpr DType Q = decltype(q)::value;
          if constexpr (!internal::IsFp8Wide(F) || !internal::IsFp8Codes(Q)) {
            return unreachable;
          } else {
            return Launch<QuantizeKernel<F, Q>>(elements, stream, op);
          }
        });
      });
    case Fp8BoxOp::Kind::kDequantize:
      return internal::VisitFloatDType(op.src_dtype, unreachable, [&](auto q) -> absl::Status {
        constexpr DType Q = decltype(q)::value;
        return internal::VisitFloatDType(op.dst_dtype, unreachable, [&](auto t) -> absl::Status {
          constexpr DType T = decltype(t)::value;
          if constexpr (!internal::IsFp8Codes(Q) || !internal::IsFp8Wide(T)) {
            return unreachable;
          } else if (op.scale_dtype == DType::kFloat8E8M0FNU) {
            return Launch<DequantizeKernel<Q, T, DType::kFloat8E8M0FNU>>(elements, stream, op);
          } else {
            return Launch<DequantizeKernel<Q, T, DType::kFloat32>>(elements, stream, op);
          }
        });
      });
  }
  return unreachable;
}

}  // namespace sdrt
