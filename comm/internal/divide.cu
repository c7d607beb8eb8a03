// DivideOnDevice (comm/internal/divide.h): one grid-stride kernel per dtype. The division
// runs once per averaged all-reduce, after the collective, so the kernel is kept plain
// (one element per access); its operations are the MPI backend's, element for element.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/divide.h"
#include "sdrt/cuda/cuda_check.h"

namespace sdrt::internal {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;

// The storage types: float16 and bfloat16 travel as their bit patterns.
struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

// The MPI backend's DivideAll: `x / divisor` in C++'s arithmetic (integers promote and
// truncate toward zero; floats divide in their own type), converted back to T.
template <typename T>
__device__ T Quotient(T x, int divisor) {
  return static_cast<T>(x / divisor);
}

// The MPI backend's Divide16: widen to float32 (exact), divide (IEEE, nearest), round to
// nearest even.
template <>
__device__ Half Quotient<Half>(Half x, int divisor) {
  const float q = __half2float(__ushort_as_half(x.bits)) / static_cast<float>(divisor);
  return Half{__half_as_ushort(__float2half_rn(q))};
}

template <>
__device__ BHalf Quotient<BHalf>(BHalf x, int divisor) {
  const float q = __bfloat162float(__ushort_as_bfloat16(x.bits)) / static_cast<float>(divisor);
  return BHalf{__bfloat16_as_ushort(__float2bfloat16_rn(q))};
}

template <typename T>
__global__ void __launch_bounds__(kThreads) DivideKernel(T* data, int64_t count, int divisor) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count;
       i += step) {
    data[i] = Quotient(data[i], divisor);
  }
}

template <typename T>
absl::Status Launch(void* data, int64_t count, int divisor, StreamHandle stream) {
  cudaLaunchConfig_t config = {};
  config.gridDim =
      dim3(static_cast<unsigned>(std::min(kMaxBlocks, (count + kThreads - 1) / kThreads)));
  config.blockDim = dim3(kThreads);
  config.stream = static_cast<cudaStream_t>(stream);
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaLaunchKernelEx(&config, DivideKernel<T>, static_cast<T*>(data), count, divisor));
  return absl::OkStatus();
}

}  // namespace

absl::Status DivideOnDevice(void* data, DType dtype, int64_t count, int divisor,
                            StreamHandle stream) {
  if (divisor < 1 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DivideOnDevice: cannot divide ", count, " elements by ", divisor));
  }
  if (count == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kUInt8:
      return Launch<uint8_t>(data, count, divisor, stream);
    case DType::kInt8:
      return Launch<int8_t>(data, count, divisor, stream);
    case DType::kInt32:
      return Launch<int32_t>(data, count, divisor, stream);
    case DType::kInt64:
      return Launch<int64_t>(data, count, divisor, stream);
    case DType::kFloat16:
      return Launch<Half>(data, count, divisor, stream);
    case DType::kBFloat16:
      return Launch<BHalf>(data, count, divisor, stream);
    case DType::kFloat32:
      return Launch<float>(data, count, divisor, stream);
    case DType::kFloat64:
      return Launch<double>(data, count, divisor, stream);
    case DType::kBool:
    case DType::kInt16:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kComplex64:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0FNU:
    case DType::kFloat6E2M3FN:
    case DType::kFloat6E3M2FN:
    case DType::kFloat4E2M1FNx2:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DivideOnDevice: the NCCL backend does not average ", DTypeName(dtype)));
}

}  // namespace sdrt::internal
