// HostRegistration and PinStorage (CUDA build): cudaHostRegister tied to an object's or a
// Storage's lifetime, so a registration is never leaked (case-020).
#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

absl::StatusOr<HostRegistration> HostRegistration::Register(void* ptr, int64_t nbytes,
                                                            unsigned flags) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("HostRegistration: negative size ", nbytes));
  }
  if (nbytes == 0) return HostRegistration();
  if (ptr == nullptr) return absl::InvalidArgumentError("HostRegistration: null pointer");
  SDRT_CUDA_RETURN_IF_ERROR(cudaHostRegister(ptr, static_cast<size_t>(nbytes), flags));
  return HostRegistration(ptr, nbytes);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), nbytes_(std::exchange(other.nbytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    (void)Release();
    ptr_ = std::exchange(other.ptr_, nullptr);
    nbytes_ = std::exchange(other.nbytes_, 0);
  }
  return *this;
}

HostRegistration::~HostRegistration() { (void)Release(); }

absl::Status HostRegistration::Release() {
  if (ptr_ == nullptr) return absl::OkStatus();
  void* ptr = std::exchange(ptr_, nullptr);
  nbytes_ = 0;
  return SDRT_CUDA_STATUS(cudaHostUnregister(ptr));
}

absl::Status PinStorage(Storage& storage, unsigned flags) {
  if (!storage.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinStorage: storage is on ", storage.device().ToString(), ", not the host"));
  }
  if (storage.nbytes() == 0 || storage.is_pinned()) return absl::OkStatus();
  SDRT_ASSIGN_OR_RETURN(HostRegistration registration,
                        HostRegistration::Register(storage.data(), storage.nbytes(), flags));
  auto owned = std::make_shared<HostRegistration>(std::move(registration));
  storage.AddFinalizer([owned] { (void)owned->Release(); }, /*marks_pinned=*/true);
  return absl::OkStatus();
}

}  // namespace sdrt
