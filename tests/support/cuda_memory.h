// What CUDA knows about a host address, for the GPU tests of pinning and registration
// (built only with CUDA; the tests that call it skip first without a device). Header-only;
// test code only.
#ifndef SDRT_TESTS_SUPPORT_CUDA_MEMORY_H_
#define SDRT_TESTS_SUPPORT_CUDA_MEMORY_H_

#include <cuda_runtime_api.h>

namespace sdrt::test {

// True when CUDA knows `ptr` as page-locked host memory: inside a cudaHostAlloc buffer or
// a registered range (cudaPointerGetAttributes reports cudaMemoryTypeHost for both;
// cudaHostGetFlags is documented for cudaHostAlloc ranges only). False for pageable or
// unmapped memory, and for a range whose registration was undone. Leaves no CUDA error.
inline bool IsPageLocked(const void* ptr) {
  cudaPointerAttributes attributes{};
  const cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

// True when cudaHostGetFlags accepts `ptr` (a cudaHostAlloc buffer; registered ranges on
// the drivers that report them). Leaves no CUDA error.
inline bool HostGetFlagsSucceeds(void* ptr) {
  unsigned flags = 0;
  const bool ok = cudaHostGetFlags(&flags, ptr) == cudaSuccess;
  (void)cudaGetLastError();
  return ok;
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_CUDA_MEMORY_H_
