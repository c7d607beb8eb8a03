// HostRegistration and PinStorage (CUDA build): cudaHostRegister, in page-aligned chunks,
// tied to an object's or a Storage's lifetime, so a registration is never leaked
// (case-020) and never half made.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/cuda/pinning_counts.h"
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

// A registration made by RegisterChunks: the registering device and each chunk's start,
// in address order.
struct Chunks {
  int device = 0;
  std::vector<void*> starts;
};

// cudaHostUnregister of every chunk, last first, on their device; the first CUDA error
// (every chunk is attempted). OK at once for no chunks.
absl::Status Unregister(const Chunks& chunks) {
  if (chunks.starts.empty()) return absl::OkStatus();
  internal::DeviceGuard guard;
  absl::Status first = guard.Enter(chunks.device);
  // Without the guard (device lost) the chunks are still unregistered: portable
  // registrations can be undone from any context.
  for (auto it = chunks.starts.rbegin(); it != chunks.starts.rend(); ++it) {
    absl::Status status = SDRT_CUDA_STATUS(cudaHostUnregister(*it));
    if (first.ok()) first = std::move(status);
  }
  return first;
}

// HostRegistration::Register's work (cuda/runtime.h), errors included. When a chunk fails,
// the chunks registered before it are unregistered (nothing stays registered) and, with
// `failed` not null, `*failed` is CUDA's error of that chunk (cudaSuccess when none
// failed): PinStorage tells a range that overlaps someone else's registration by it.
absl::StatusOr<Chunks> RegisterChunks(void* ptr, int64_t nbytes, unsigned flags,
                                      const HostRegistrationOptions& options, cudaError_t* failed) {
  if (failed != nullptr) *failed = cudaSuccess;
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("HostRegistration: negative size ", nbytes));
  }
  if (options.chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("HostRegistration: chunk_bytes must be >= 1, got ", options.chunk_bytes));
  }
  if (nbytes == 0) return Chunks();
  if (ptr == nullptr) return absl::InvalidArgumentError("HostRegistration: null pointer");
  SDRT_ASSIGN_OR_RETURN(const std::vector<internal::RegistrationChunk> planned,
                        internal::PlanRegistrationChunks(reinterpret_cast<uintptr_t>(ptr), nbytes,
                                                         options.chunk_bytes, sysconf(_SC_PAGESIZE),
                                                         options.unbroken_ranges));
  Chunks chunks;
  SDRT_ASSIGN_OR_RETURN(chunks.device, internal::ResolveCudaDevice(options.device));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(chunks.device));
  SDRT_ASSIGN_OR_RETURN(const unsigned device_flags, FlagsForDevice(flags, chunks.device));
  chunks.starts.reserve(planned.size());
  for (size_t i = 0; i < planned.size(); ++i) {
    char* start = static_cast<char*>(ptr) + planned[i].offset;
    internal::CountHostRegistration();
    const cudaError_t error =
        cudaHostRegister(start, static_cast<size_t>(planned[i].nbytes), device_flags);
    if (error != cudaSuccess) {
      const absl::Status status = internal::CudaStatus(
          error, "cudaHostRegister(start, chunk bytes, flags)", __FILE__, __LINE__);
      (void)Unregister(chunks);  // roll back; the first error is the one to report
      if (failed != nullptr) *failed = error;
      return absl::Status(
          status.code(),
          absl::StrCat("HostRegistration: chunk ", i, " of ", planned.size(), " (bytes ",
                       planned[i].offset, "..", planned[i].offset + planned[i].nbytes, " of ",
                       nbytes, ") on device ", chunks.device, ": ", status.message()));
    }
    chunks.starts.push_back(start);
  }
  return chunks;
}

}  // namespace

absl::StatusOr<HostRegistration> HostRegistration::Register(
    void* ptr, int64_t nbytes, unsigned flags, const HostRegistrationOptions& options) {
  SDRT_ASSIGN_OR_RETURN(Chunks chunks, RegisterChunks(ptr, nbytes, flags, options, nullptr));
  HostRegistration registration;
  registration.device_ = chunks.device;
  registration.chunks_ = std::move(chunks.starts);
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
  return Unregister(Chunks{device_, std::exchange(chunks_, {})});
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
  cudaError_t failed = cudaSuccess;
  absl::StatusOr<Chunks> chunks =
      RegisterChunks(storage.data(), storage.nbytes(), flags, options, &failed);
  if (failed == cudaErrorHostMemoryAlreadyRegistered) {
    // Part of the range is someone else's registration (a chunk overlaps it): pinned, not
    // owned, as above. Nothing of ours stays registered, so no finalizer.
    storage.MarkPinned();
    return absl::OkStatus();
  }
  SDRT_RETURN_IF_ERROR(chunks.status());
  auto owned = std::make_shared<const Chunks>(*std::move(chunks));
  storage.AddFinalizer([owned] { (void)Unregister(*owned); }, /*marks_pinned=*/true);
  return absl::OkStatus();
}

}  // namespace sdrt
