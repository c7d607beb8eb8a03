// HostRegistration and PinStorage (CUDA build): cudaHostRegister, in page-aligned chunks,
// tied to an object's or a Storage's lifetime, so a registration is never leaked
// (case-020) and never half made.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/cuda/registration_chunks.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// The flags to register with on the current device `device`: kHostRegisterReadOnly is
// kept where the device supports it and dropped where the device reads pageable memory
// through the host's page tables (there cudaHostRegister only populates the pages, and
// read-only pages need no flag); elsewhere read-only pages cannot be registered at all.
absl::StatusOr<unsigned> FlagsForDevice(unsigned flags, int device) {
  if ((flags & kHostRegisterReadOnly) == 0) return flags;
  int read_only = 0;
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&read_only, cudaDevAttrHostRegisterReadOnlySupported, device));
  if (read_only != 0) return flags;
  int host_page_tables = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &host_page_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables, device));
  if (host_page_tables != 0) return flags & ~static_cast<unsigned>(kHostRegisterReadOnly);
  return absl::FailedPreconditionError(absl::StrCat(
      "HostRegistration: device ", device,
      " does not support cudaHostRegisterReadOnly (cudaDevAttrHostRegisterReadOnlySupported = 0) "
      "and does not read host memory through the host's page tables, so read-only pages "
      "cannot be registered"));
}

// Whether CUDA already knows `ptr` as page-locked host memory (cudaHostAlloc or
// cudaHostRegister, by anyone).
absl::StatusOr<bool> IsPageLocked(const void* ptr) {
  cudaPointerAttributes attributes{};
  SDRT_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, ptr));
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

absl::StatusOr<HostRegistration> HostRegistration::Register(
    void* ptr, int64_t nbytes, unsigned flags, const HostRegistrationOptions& options) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("HostRegistration: negative size ", nbytes));
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostRegistration: chunk_bytes must be >= 1, got ", options.chunk_bytes));
  }
  if (nbytes == 0) return HostRegistration();
  if (ptr == nullptr) return absl::InvalidArgumentError("HostRegistration: null pointer");
  SDRT_ASSIGN_OR_RETURN(
      const std::vector<internal::RegistrationChunk> chunks,
      internal::PlanRegistrationChunks(reinterpret_cast<uintptr_t>(ptr), nbytes,
                                       options.chunk_bytes, sysconf(_SC_PAGESIZE),
                                       options.unbroken_ranges));
  SDRT_ASSIGN_OR_RETURN(const int device, internal::ResolveCudaDevice(options.device));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  SDRT_ASSIGN_OR_RETURN(const unsigned device_flags, FlagsForDevice(flags, device));
  HostRegistration registration;
  registration.device_ = device;
  registration.chunks_.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    char* start = static_cast<char*>(ptr) + chunks[i].offset;
    const absl::Status status = SDRT_CUDA_STATUS(
        cudaHostRegister(start, static_cast<size_t>(chunks[i].nbytes), device_flags));
    if (!status.ok()) {
      (void)registration.Release();  // roll back; the first error is the one to report
      return absl::Status(
          status.code(),
          absl::StrCat("HostRegistration: chunk ", i, " of ", chunks.size(), " (bytes ",
                       chunks[i].offset, "..", chunks[i].offset + chunks[i].nbytes, " of ", nbytes,
                       ") on device ", device, ": ", status.message()));
    }
    registration.chunks_.push_back(start);
  }
  return registration;
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : chunks_(std::exchange(other.chunks_, {})), device_(other.device_) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
  if (this != &other) {
    (void)Release();
    chunks_ = std::exchange(other.chunks_, {});
    device_ = other.device_;
  }
  return *this;
}

HostRegistration::~HostRegistration() { (void)Release(); }

absl::Status HostRegistration::Release() {
  if (chunks_.empty()) return absl::OkStatus();
  std::vector<void*> chunks = std::exchange(chunks_, {});
  internal::DeviceGuard guard;
  absl::Status first = guard.Enter(device_);
  // Without the guard (device lost) the chunks are still unregistered: portable
  // registrations can be undone from any context.
  for (auto it = chunks.rbegin(); it != chunks.rend(); ++it) {
    absl::Status status = SDRT_CUDA_STATUS(cudaHostUnregister(*it));
    if (first.ok()) first = std::move(status);
  }
  return first;
}

absl::Status PinStorage(Storage& storage, unsigned flags, const HostRegistrationOptions& options) {
  if (!storage.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PinStorage: storage is on ", storage.device().ToString(), ", not the host"));
  }
  if (storage.nbytes() == 0 || storage.is_pinned()) return absl::OkStatus();
  {
    SDRT_ASSIGN_OR_RETURN(const int device, internal::ResolveCudaDevice(options.device));
    internal::DeviceGuard guard;
    SDRT_RETURN_IF_ERROR(guard.Enter(device));
    const char* first = static_cast<const char*>(storage.data());
    SDRT_ASSIGN_OR_RETURN(const bool first_locked, IsPageLocked(first));
    SDRT_ASSIGN_OR_RETURN(const bool last_locked, IsPageLocked(first + storage.nbytes() - 1));
    if (first_locked && last_locked) {
      storage.MarkPinned();  // someone else's registration: theirs to undo
      return absl::OkStatus();
    }
  }
  SDRT_ASSIGN_OR_RETURN(
      HostRegistration registration,
      HostRegistration::Register(storage.data(), storage.nbytes(), flags, options));
  auto owned = std::make_shared<HostRegistration>(std::move(registration));
  storage.AddFinalizer([owned] { (void)owned->Release(); }, /*marks_pinned=*/true);
  return absl::OkStatus();
}

}  // namespace sdrt
