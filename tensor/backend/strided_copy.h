// Host (CPU) paths of sdrt's three copy kernels, and the contract the CUDA kernels in
// cuda/kernels.h follow bit for bit.
//
// All sizes, strides and offsets are in ELEMENTS (PyTorch order: dim 0 outermost);
// `elem_size` is in bytes (1, 2, 4, 8 or 16). Pointers are raw: these functions know
// nothing of Tensor or Storage, which lets tensor/, cuda/ and comm/ all call them. The
// index arithmetic they run lives in tensor/backend/index_math.h and is compiled for the GPU too.
//
// Every function validates its arguments and returns InvalidArgument naming the op, the
// dim and the sizes on bad input (negative sizes, mismatched ranks, more dims than
// kMaxCopyDims after merging, a zero-size element). Zero-element copies are no-ops.
// Source and destination must not overlap.
#ifndef SDRT_TENSOR_BACKEND_STRIDED_COPY_H_
#define SDRT_TENSOR_BACKEND_STRIDED_COPY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace sdrt {

// Most dims a copy may have after adjacent contiguous dims are merged.
inline constexpr int kMaxCopyDims = 12;

// dst[i0, .., in] = src[i0, .., in] for every index of `sizes`, where element (i...) of
// src lives at src + elem_size * sum(i_k * src_strides[k]) and likewise for dst.
// Negative strides are rejected. This one copy covers:
//   - narrow/slice into a contiguous buffer (src = strided sub-block, dst contiguous),
//   - the inverse, a contiguous buffer into a sub-block of a strided tensor,
//   - Tensor::Contiguous and Tensor::CopyFrom between differently strided tensors.
absl::Status StridedCopyHost(void* dst, const void* src, int64_t elem_size,
                             absl::Span<const int64_t> sizes, absl::Span<const int64_t> dst_strides,
                             absl::Span<const int64_t> src_strides);

// Pad: copies `src_bytes` from src to the start of dst and zero-fills dst up to
// `dst_bytes` (dst_bytes >= src_bytes, else InvalidArgument). Used to make an all-gather
// input of `chunk` elements out of a shorter flat shard.
absl::Status PadHost(void* dst, int64_t dst_bytes, const void* src, int64_t src_bytes);

// Unshard: `gathered` holds `num_chunks` contiguous chunks in rank order, chunk r being a
// contiguous tensor of shape `full_shape` with dim `dim` replaced by
// c = ceil(full_shape[dim] / num_chunks) (every shard padded to c). Writes the full
// tensor, contiguous with shape `full_shape`, to `full`:
//   full[.., j, ..] = chunk[j / c][.., j % c, ..]   for j in [0, full_shape[dim]).
// Padding entries are never read. This is the "all-gather then cat along dim, then
// narrow" of PyTorch's Shard(dim) -> Replicate for dim > 0 in one pass.
absl::Status UnshardHost(void* full, const void* gathered, int64_t elem_size,
                         absl::Span<const int64_t> full_shape, int dim, int64_t num_chunks);

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_STRIDED_COPY_H_
