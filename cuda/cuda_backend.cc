// The CUDA DeviceBackend: what tensor/ calls for CUDA memory (allocation, copies, float
// conversions).
//
// It is registered by a static initializer. Static libraries drop object files nobody
// references, so cuda/CMakeLists.txt forces this one in with the linker's --undefined
// on sdrt_cuda_backend_anchor (Note [backend registration]).
#include <cuda_runtime_api.h>

#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/cuda/fp8_kernels.h"
#include "sdrt/cuda/kernels.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

class CudaBackend final : public DeviceBackend {
 public:
  absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t nbytes, Device device) override {
    return AllocateDeviceBuffer(nbytes, device.index);
  }

  absl::Status Memcpy(void* dst, Device dst_device, const void* src, Device src_device,
                      int64_t nbytes, StreamHandle stream, bool non_blocking) override {
    if (nbytes == 0) return absl::OkStatus();
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(dst_device.is_cuda() ? dst_device.index : src_device.index));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    // Unified addressing lets the runtime infer the direction (and peer copies).
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, static_cast<size_t>(nbytes), cudaMemcpyDefault, s));
    if (!non_blocking) SDRT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
  }

  absl::Status Memcpy2D(void* dst, int64_t dst_pitch, Device dst_device, const void* src,
                        int64_t src_pitch, Device src_device, int64_t width, int64_t height,
                        StreamHandle stream, bool non_blocking) override {
    if (width == 0 || height == 0) return absl::OkStatus();
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(dst_device.is_cuda() ? dst_device.index : src_device.index));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
        static_cast<size_t>(width), static_cast<size_t>(height), cudaMemcpyDefault, s));
    if (!non_blocking) SDRT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
  }

  absl::Status Memset(void* dst, uint8_t value, int64_t nbytes, Device device, StreamHandle stream,
                      bool non_blocking) override {
    if (nbytes == 0) return absl::OkStatus();
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(device.index));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    SDRT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dst, value, static_cast<size_t>(nbytes), s));
    if (!non_blocking) SDRT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return absl::OkStatus();
  }

  absl::Status StridedCopy(void* dst, const void* src, int64_t elem_size,
                           absl::Span<const int64_t> sizes, absl::Span<const int64_t> dst_strides,
                           absl::Span<const int64_t> src_strides, Device device,
                           StreamHandle stream, bool non_blocking) override {
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(device.index));
    SDRT_RETURN_IF_ERROR(
        StridedCopyDevice(dst, src, elem_size, sizes, dst_strides, src_strides, stream));
    if (non_blocking) return absl::OkStatus();
    return SDRT_CUDA_STATUS(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }

  absl::Status ConvertFloats(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                             int64_t count, Device device, StreamHandle stream,
                             bool non_blocking) override {
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(device.index));
    SDRT_RETURN_IF_ERROR(ConvertFloatsDevice(dst, dst_dtype, src, src_dtype, count, stream));
    if (non_blocking) return absl::OkStatus();
    return SDRT_CUDA_STATUS(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }

  absl::Status Fp8Box(const Fp8BoxOp& op, Device device, StreamHandle stream,
                      bool non_blocking) override {
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(device.index));
    SDRT_RETURN_IF_ERROR(Fp8BoxDevice(op, stream));
    if (non_blocking) return absl::OkStatus();
    return SDRT_CUDA_STATUS(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
};

CudaBackend g_backend;

// Note [backend registration]: runs when the program starts, before main.
const bool g_registered = [] {
  RegisterDeviceBackend(DeviceType::kCUDA, &g_backend);
  return true;
}();

}  // namespace
}  // namespace sdrt

// Referenced by the linker flag --undefined=sdrt_cuda_backend_anchor (cuda/CMakeLists.txt).
extern "C" {
int sdrt_cuda_backend_anchor = 1;
}
