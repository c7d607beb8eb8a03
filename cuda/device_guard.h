// DeviceGuard: makes a CUDA device current for a scope and restores the caller's device
// afterwards, like PyTorch's device guard, so work on cuda:1 does not leave the caller on
// device 1. Public for sdrt code that itself includes CUDA's headers (cuda/ and the NCCL
// backend in comm/), like cuda_check.h.
#ifndef SDRT_CUDA_DEVICE_GUARD_H_
#define SDRT_CUDA_DEVICE_GUARD_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "sdrt/cuda/cuda_check.h"

namespace sdrt::internal {

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  // Switches to `device`, remembering the current one; CUDA's error as a Status.
  absl::Status Enter(int device) {
    SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) SDRT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    return absl::OkStatus();
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = -1;
};

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_DEVICE_GUARD_H_
