// The check macro for CUDA runtime calls, turning return codes into absl::Status. Public
// for sdrt code that itself includes CUDA's headers (cuda/ and the NCCL backend in comm/;
// NCCL's own macro is in comm/internal/nccl_check.h); every other layer sees no CUDA type
// and uses cuda/runtime.h and cuda/kernels.h instead.
//
//   SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(...));
//   absl::Status s = SDRT_CUDA_STATUS(cudaStreamCreate(&s));
//
// The Status carries the call text, file:line, the current device and CUDA's error name
// and string. Sticky-free errors are cleared with cudaGetLastError so the next call does
// not see a stale failure.
#ifndef SDRT_CUDA_CUDA_CHECK_H_
#define SDRT_CUDA_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace sdrt::internal {

// OK for cudaSuccess; otherwise an error Status describing `call` at file:line.
absl::Status CudaStatus(cudaError_t err, const char* call, const char* file, int line);

// For CUDA calls whose failure nobody can act on (destructors, a guard's restore): clears
// the error a failed call left (cudaGetLastError), so that it is not reported later by an
// unrelated call. A sticky error (a faulted kernel) cannot be cleared and stays visible.
inline void DiscardCudaError(cudaError_t err) {
  if (err != cudaSuccess) (void)cudaGetLastError();
}

}  // namespace sdrt::internal

#define SDRT_CUDA_STATUS(expr) ::sdrt::internal::CudaStatus((expr), #expr, __FILE__, __LINE__)

#define SDRT_CUDA_RETURN_IF_ERROR(expr)                        \
  do {                                                         \
    ::absl::Status sdrt_cuda_status_ = SDRT_CUDA_STATUS(expr); \
    if (!sdrt_cuda_status_.ok()) return sdrt_cuda_status_;     \
  } while (0)

#endif  // SDRT_CUDA_CUDA_CHECK_H_
