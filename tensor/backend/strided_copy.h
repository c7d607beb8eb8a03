// The host (CPU) strided copy, and the contract the CUDA kernel in cuda/kernels.h follows
// bit for bit (the same validation and plan, PrepareStridedCopy, and the same index
// arithmetic).
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
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// dst[i0, .., in] = src[i0, .., in] for every index of `sizes`, where element (i...) of
// src lives at src + elem_size * sum(i_k * src_strides[k]) and likewise for dst.
// Negative strides, and a destination stride of 0 on a dim of size > 1, are rejected
// (PrepareStridedCopy lists every rule). This one copy covers:
//   - narrow/slice into a contiguous buffer (src = strided sub-block, dst contiguous),
//   - the inverse, a contiguous buffer into a sub-block of a strided tensor,
//   - Tensor::Contiguous and Tensor::CopyFrom between differently strided tensors.
absl::Status StridedCopyHost(void* dst, const void* src, int64_t elem_size,
                             absl::Span<const int64_t> sizes, absl::Span<const int64_t> dst_strides,
                             absl::Span<const int64_t> src_strides);

namespace internal SDRT_HIDDEN {

// Validates a strided copy (see StridedCopyHost) and returns its plan for these
// addresses; plan.numel == 0 for an empty copy, whose pointers may be null.
// InvalidArgument, prefixed with `op`, for: elem_size not in {1, 2, 4, 8, 16}; spans of
// different lengths; a negative size or stride; more than 2^63 - 1 elements or bytes
// spanned by either layout; a non-empty copy whose dst has stride 0 on a dim of size > 1
// (aliased elements: the result would depend on the order of the writes; a stride-0
// src, a broadcast read, is fine); more than kMaxCopyDims dims after merging; a null
// pointer for a non-empty copy. One rule for the host path and the kernel.
absl::StatusOr<CopyPlan> PrepareStridedCopy(absl::string_view op, void* dst, const void* src,
                                            int64_t elem_size, absl::Span<const int64_t> sizes,
                                            absl::Span<const int64_t> dst_strides,
                                            absl::Span<const int64_t> src_strides);

}  // namespace internal

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_STRIDED_COPY_H_
