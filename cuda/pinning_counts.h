// The counters behind HostPinningCountsSoFar (cuda/runtime.h): the two places that pin host
// memory (host_registration.cc's cudaHostRegister, runtime.cc's cudaHostAlloc) count each
// call here. Not public API.
#ifndef SDRT_CUDA_PINNING_COUNTS_H_
#define SDRT_CUDA_PINNING_COUNTS_H_

namespace sdrt::internal {

// One cudaHostRegister call (one chunk of a registration) is about to be made.
void CountHostRegistration();
// One cudaHostAlloc call is about to be made.
void CountPinnedAllocation();

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_PINNING_COUNTS_H_
