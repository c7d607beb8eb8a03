// DeviceGuard: makes a CUDA device current for a scope, like PyTorch's CUDAGuard, without
// ever creating a CUDA context on a device the process has not used. Public for sdrt code
// that itself includes CUDA's headers (cuda/ and the NCCL backend in comm/), like
// cuda_check.h.
//
// Since CUDA 12, cudaSetDevice creates the device's primary context (about 500 MB of
// device memory, and a hard failure on a GPU in EXCLUSIVE_PROCESS mode that another
// process owns). A thread starts on device 0 without a context there, so a guard that
// restored "the previous device" with cudaSetDevice would open a context on GPU 0 in every
// rank. This guard follows PyTorch's c10::cuda::MaybeSetDevice instead: it switches only
// when the target differs from the current device, and on exit switches back only when
// the previous device's primary context is active; otherwise the thread stays on the
// guard's device, whose context the guarded work has created anyway.
#ifndef SDRT_CUDA_DEVICE_GUARD_H_
#define SDRT_CUDA_DEVICE_GUARD_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sdrt::internal {

// Whether the primary context of CUDA device `device` (a runtime ordinal) is active, i.e.
// some CUDA call of this process has created it (cuDevicePrimaryCtxGetState, reached through
// cudaGetDriverEntryPointByVersion so that sdrt does not link libcuda). Creates no context.
// InvalidArgument for an ordinal that is not a visible device; Unavailable without a driver.
absl::StatusOr<bool> PrimaryContextIsActive(int device);

// The calling thread's current device for -1 (kCurrentCudaDevice in cuda/runtime.h), else
// `device` itself (an invalid one fails where it is used). CUDA's error as a Status.
absl::StatusOr<int> ResolveCudaDevice(int device);

class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  // Makes `device` current for the calling thread (cudaSetDevice only when another device
  // is current), remembering the current one. Call at most once per guard. CUDA's error as
  // a Status; on error the current device is unchanged.
  absl::Status Enter(int device);
  // Switches back to the device current at Enter when it differs and its primary context
  // is active; otherwise leaves the thread on the entered device. Never creates a context
  // and leaves no CUDA error behind.
  ~DeviceGuard();

 private:
  int previous_ = -1;  // current device at Enter
  int entered_ = -1;   // the device Enter made current; -1 until Enter succeeded
};

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_DEVICE_GUARD_H_
