// The GPU kernels: the strided (narrow/slice) copy that Tensor::CopyFrom runs for CUDA
// tensors (through the DeviceBackend cuda/ registers), so every region copy of the
// distributed operations (gather unpacking, broadcast slicing, DistributeTensor) on a GPU
// is this kernel; and the float conversion of the transfer engine's casts of device
// buckets (the device twin of ConvertFloats, tensor/internal/float_cast.h).
//
// It is the device twin of StridedCopyHost in tensor/backend/strided_copy.h: same parameters
// (sizes, strides and offsets in elements, elem_size in bytes, 1, 2, 4, 8 or 16), same validation
// (messages name the device function), same plan (tensor/backend/index_math.h), and a bit-identical
// result. The kernels move `width`-byte accesses, 16 bytes where the addresses and strides allow,
// with int64 offsets.
//
// ConvertFloatsDevice runs the same element conversions as ConvertFloats (float_cast.h's
// FloatCodec), cut into vector accesses by tensor/backend/convert_plan.h.
//
// Common contract:
//   - The kernel runs on the current CUDA device, which must own `stream`. The launch's
//     status is its own (cudaLaunchKernelEx), never an earlier call's error. Returning OK
//     means the work is ENQUEUED on `stream` (a cudaStream_t; nullptr is the legacy
//     default stream); it completes asynchronously, in stream order. The caller keeps
//     both buffers alive and unmodified until then.
//   - Pointers must be accessible from the current device: its device memory (or a
//     peer's, with peer access enabled), or pinned or registered host memory
//     (cudaHostAlloc / cudaHostRegister, device-accessible under UVA).
//   - Source and destination must not overlap.
//   - Every error is returned: InvalidArgument for bad arguments (checked on the host
//     before anything is enqueued), and the CUDA error of a failed launch as a Status
//     (cuda/cuda_check.h). A fault while the kernel runs (a bad pointer) surfaces, as
//     for any launch, at the next synchronizing call. Zero-element calls enqueue nothing
//     and return OK, also with null pointers.
// No CUDA types or headers appear here, so any layer may include this header.
#ifndef SDRT_CUDA_KERNELS_H_
#define SDRT_CUDA_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// dst[i0, .., in] = src[i0, .., in] for every index of `sizes` (PyTorch order, dim 0
// outermost), where element (i...) of src lives at src + elem_size * sum(i_k *
// src_strides[k]) and likewise for dst; strides >= 0. Narrow/slice into a contiguous
// buffer, its inverse, and contiguous-ization are all this one call (see
// StridedCopyHost). InvalidArgument for elem_size not in {1, 2, 4, 8, 16}, spans of
// different lengths, a negative size or stride, a dst stride of 0 on a dim of size > 1
// (aliased destination elements), a layout spanning more than 2^63 - 1 bytes, more than
// kMaxCopyDims dims left after merging adjacent dims contiguous in both layouts, or a
// null pointer for a non-empty copy (the host path's rules: PrepareStridedCopy).
absl::Status StridedCopyDevice(void* dst, const void* src, int64_t elem_size,
                               absl::Span<const int64_t> sizes,
                               absl::Span<const int64_t> dst_strides,
                               absl::Span<const int64_t> src_strides, StreamHandle stream);

// Converts `count` dense elements of `src_dtype` at `src` into `dst_dtype` at `dst`, bit for
// bit as ConvertFloats converts them on the host (PyTorch's `Tensor.to()`; a NaN stays a
// NaN); the same dtype is copied as it is (cudaMemcpyAsync). Either pointer may sit at any
// byte address (16-byte accesses on the wider side where both sides allow them).
// InvalidArgument for a dtype not of CastKind kFloat (tensor/dtype.h: bfloat16, float16,
// float32, float8 e4m3fn / e5m2 / e8m0fnu), a negative count, a count whose bytes exceed
// 2^63 - 1, or a null pointer for a non-empty conversion.
absl::Status ConvertFloatsDevice(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                 int64_t count, StreamHandle stream);

}  // namespace sdrt

#endif  // SDRT_CUDA_KERNELS_H_
