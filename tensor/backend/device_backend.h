// DeviceBackend: how tensor/ reaches memory it cannot touch itself.
//
// tensor/ sits below cuda/ and never includes CUDA headers, yet Tensor::Empty and Zeros on a
// CUDA device, Tensor::To and Tensor::CopyFrom across devices need cudaMalloc,
// cudaMemsetAsync and cudaMemcpyAsync, the transfer engine's casts of device buffers a
// conversion kernel, and FP8 destinations on a device the block-FP8 kernels. cuda/ implements this interface and registers it for
// DeviceType::kCUDA when its library is linked (see cuda/cuda_backend.cc); a build
// without CUDA leaves it unregistered and those calls return FailedPrecondition.
#ifndef SDRT_TENSOR_BACKEND_DEVICE_BACKEND_H_
#define SDRT_TENSOR_BACKEND_DEVICE_BACKEND_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // Uninitialised memory of `nbytes` bytes on `device`.
  virtual absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t nbytes, Device device) = 0;

  // Copies `nbytes` contiguous bytes between any two of {host, this backend's devices}.
  // Enqueued on `stream`; when `non_blocking` is false the call returns after the copy is
  // complete. Host memory that is not pinned makes the copy synchronous in practice.
  virtual absl::Status Memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                              int64_t nbytes, StreamHandle stream, bool non_blocking) = 0;

  // Copies `height` rows of `width` bytes from rows `src_pitch` bytes apart at `src` to
  // rows `dst_pitch` bytes apart at `dst` (cudaMemcpy2DAsync; pitches >= width), between any
  // two of {host, this backend's devices}. Stream and `non_blocking` as Memcpy.
  virtual absl::Status Memcpy2D(void* dst, int64_t dst_pitch, Device dst_device, const void* src,
                                int64_t src_pitch, Device src_device, int64_t width,
                                int64_t height, StreamHandle stream, bool non_blocking) = 0;

  // Sets `nbytes` bytes at `dst` on `device` to `value` (cudaMemsetAsync): Tensor::Zeros
  // on a device without a host buffer. Enqueued on `stream` (of `device`; nullptr: its
  // legacy default stream); when `non_blocking` is false the call returns after the bytes
  // are set.
  virtual absl::Status Memset(void* dst, uint8_t value, int64_t nbytes, Device device,
                              StreamHandle stream, bool non_blocking) = 0;

  // Element-wise strided copy with both pointers on `device` (see tensor/backend/strided_copy.h
  // for the meaning of the arguments); enqueued on `stream`, synchronous unless
  // `non_blocking`.
  virtual absl::Status StridedCopy(void* dst, const void* src, int64_t elem_size,
                                   absl::Span<const int64_t> sizes,
                                   absl::Span<const int64_t> dst_strides,
                                   absl::Span<const int64_t> src_strides, Device device,
                                   StreamHandle stream, bool non_blocking) = 0;

  // Converts `count` dense elements of `src_dtype` at `src` into `dst_dtype` at `dst`, both
  // on `device`, bit for bit as ConvertFloats (tensor/internal/float_cast.h) converts them on
  // the host: PyTorch's `Tensor.to()` (a NaN stays a NaN); the same dtype is copied as it
  // is. Either pointer may sit at any byte address; the two must not overlap. Enqueued on
  // `stream` (of `device`), synchronous unless `non_blocking`. InvalidArgument for a dtype
  // not of CastKind kFloat (tensor/dtype.h), a negative count, or a null pointer for a
  // non-empty conversion; the backend's errors.
  virtual absl::Status ConvertFloats(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                     int64_t count, Device device, StreamHandle stream,
                                     bool non_blocking) = 0;

  // Runs a block-FP8 op (tensor/backend/fp8_box.h) with every pointer on `device`, bit for
  // bit as the host loops run it; `op` is already validated (ValidateFp8Box) and not empty.
  // Enqueued on `stream` (of `device`), synchronous unless `non_blocking`. The backend's
  // errors.
  virtual absl::Status Fp8Box(const Fp8BoxOp& op, Device device, StreamHandle stream,
                              bool non_blocking) = 0;
};

// Installs `backend` (not owned; must outlive every later call) for `type`. Passing
// nullptr removes it. Thread-safe.
void RegisterDeviceBackend(DeviceType type, DeviceBackend* backend);

// The backend for `type`, or FailedPrecondition saying that sdrt was built without it.
absl::StatusOr<DeviceBackend*> GetDeviceBackend(DeviceType type);

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_DEVICE_BACKEND_H_
