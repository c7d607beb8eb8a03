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
  // The dtypes NCCL reduces (internal/nccl_types.h), in the arithmetic of their reduce kind
  // and width (the dtype table's reduce column).
  const int bits = ElementBits(dtype);
  switch (ReduceKindOf(dtype)) {
    case ReduceKind::kSigned:
      if (bits == 8) return Launch<int8_t>(data, count, divisor, stream);
      if (bits == 32) return Launch<int32_t>(data, count, divisor, stream);
      if (bits == 64) return Launch<int64_t>(data, count, divisor, stream);
      break;  // int16: NCCL has no 16-bit integer
    case ReduceKind::kUnsigned:
      if (bits == 8) return Launch<uint8_t>(data, count, divisor, stream);
      if (bits == 32) return Launch<uint32_t>(data, count, divisor, stream);
      if (bits == 64) return Launch<uint64_t>(data, count, divisor, stream);
      break;
    case ReduceKind::kFloat:
      if (bits == 16) return Launch<Half>(data, count, divisor, stream);
      if (bits == 32) return Launch<float>(data, count, divisor, stream);
      return Launch<double>(data, count, divisor, stream);
    case ReduceKind::kBFloat:
      return Launch<BHalf>(data, count, divisor, stream);
    case ReduceKind::kBool:
    case ReduceKind::kNone:
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("DivideOnDevice: the NCCL backend does not average ", DTypeName(dtype)));
}

}  // namespace sdrt::internal
