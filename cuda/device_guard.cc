// DeviceGuard and PrimaryContextIsActive (cuda/device_guard.h).
#include "sdrt/cuda/device_guard.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"

namespace sdrt::internal {
namespace {

// The two driver entry points, looked up once through the runtime (which loads the driver
// itself), so that sdrt links only cudart and a machine without a driver can still run it.
struct DriverEntryPoints {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDevicePrimaryCtxGetState_v7000 primary_ctx_get_state = nullptr;
  absl::Status status;
};

// Looks up `symbol` as of CUDA 12.0 (every driver cudart 13 runs on has it).
absl::Status LookUp(const char* symbol, void** function) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaGetDriverEntryPointByVersion(symbol, function, 12000, cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || *function == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("the CUDA driver has no ", symbol, " (query result ", found, ")"));
  }
  return absl::OkStatus();
}

const DriverEntryPoints& Driver() {
  static const DriverEntryPoints* const entry_points = [] {
    auto* e = new DriverEntryPoints;
    void* device_get = nullptr;
    void* get_state = nullptr;
    e->status = LookUp("cuDeviceGet", &device_get);
    if (e->status.ok()) e->status = LookUp("cuDevicePrimaryCtxGetState", &get_state);
    e->device_get = reinterpret_cast<PFN_cuDeviceGet_v2000>(device_get);
    e->primary_ctx_get_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(get_state);
    return e;
  }();
  return *entry_points;
}

}  // namespace

absl::StatusOr<bool> PrimaryContextIsActive(int device) {
  const DriverEntryPoints& driver = Driver();
  if (!driver.status.ok()) return driver.status;
  CUdevice handle = 0;
  CUresult result = driver.device_get(&handle, device);
  if (result == CUDA_SUCCESS) {
    unsigned flags = 0;
    int active = 0;
    result = driver.primary_ctx_get_state(handle, &flags, &active);
    if (result == CUDA_SUCCESS) return active != 0;
  }
  const std::string message =
      absl::StrCat("PrimaryContextIsActive(", device, "): CUDA driver error ", result);
  if (result == CUDA_ERROR_INVALID_DEVICE || result == CUDA_ERROR_INVALID_VALUE) {
    return absl::InvalidArgumentError(message);
  }
  return absl::UnavailableError(message);
}

absl::StatusOr<int> ResolveCudaDevice(int device) {
  if (device != -1) return device;
  int current = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&current));
  return current;
}

absl::Status DeviceGuard::Enter(int device) {
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
  if (previous_ != device) SDRT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  entered_ = device;
  return absl::OkStatus();
}

DeviceGuard::~DeviceGuard() {
  if (entered_ < 0 || previous_ == entered_) return;
  const absl::StatusOr<bool> active = PrimaryContextIsActive(previous_);
  if (active.ok() && *active) DiscardCudaError(cudaSetDevice(previous_));
}

}  // namespace sdrt::internal
