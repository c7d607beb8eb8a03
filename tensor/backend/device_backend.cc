#include "sdrt/tensor/backend/device_backend.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace sdrt {
namespace {

std::atomic<DeviceBackend*> g_cuda_backend{nullptr};

}  // namespace

void RegisterDeviceBackend(DeviceType type, DeviceBackend* backend) {
  if (type == DeviceType::kCUDA) g_cuda_backend.store(backend);
}

absl::StatusOr<DeviceBackend*> GetDeviceBackend(DeviceType type) {
  if (type == DeviceType::kCUDA) {
    DeviceBackend* backend = g_cuda_backend.load();
    if (backend != nullptr) return backend;
    return absl::FailedPreconditionError(
        "no CUDA backend: this sdrt was built without CUDA (SDRT_WITH_CUDA=OFF)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no device backend for ", Device{type, 0}.ToString()));
}

}  // namespace sdrt
