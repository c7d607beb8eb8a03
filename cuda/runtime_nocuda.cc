// Build without CUDA: the public API of cuda/ exists so that callers compile unchanged,
// and every call that would need the GPU says so with absl::UnavailableError.
#include "absl/strings/str_cat.h"
#include "sdrt/cuda/kernels.h"
#include "sdrt/cuda/runtime.h"

namespace sdrt {
namespace {

absl::Status NoCuda(const char* what) {
  return absl::UnavailableError(absl::StrCat(what, ": sdrt was built without CUDA"));
}

}  // namespace

bool BuiltWithCuda() { return false; }
int CudaDeviceCount() { return 0; }
absl::Status CudaAvailable() { return NoCuda("CudaAvailable"); }
std::string CudaVersionString() { return "built without CUDA"; }
absl::Status SetCurrentCudaDevice(int) { return NoCuda("SetCurrentCudaDevice"); }
absl::StatusOr<std::string> CudaPciBusId(int) { return NoCuda("CudaPciBusId"); }

absl::StatusOr<CudaStream> CudaStream::Create(int) { return NoCuda("CudaStream::Create"); }
CudaStream::CudaStream(CudaStream&& other) noexcept = default;
CudaStream& CudaStream::operator=(CudaStream&& other) noexcept = default;
CudaStream::~CudaStream() = default;
absl::Status CudaStream::Synchronize() const { return NoCuda("CudaStream::Synchronize"); }

absl::StatusOr<CudaEvent> CudaEvent::Create(int, EventTiming) {
  return NoCuda("CudaEvent::Create");
}
CudaEvent::CudaEvent(CudaEvent&& other) noexcept = default;
CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept = default;
CudaEvent::~CudaEvent() = default;
absl::Status CudaEvent::Record(StreamHandle) { return NoCuda("CudaEvent::Record"); }
absl::Status CudaEvent::Synchronize() const { return NoCuda("CudaEvent::Synchronize"); }
absl::Status CudaEvent::Block(StreamHandle) const { return NoCuda("CudaEvent::Block"); }
absl::Status WaitForLegacyStream(int, StreamHandle) { return NoCuda("WaitForLegacyStream"); }
absl::StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent&, const CudaEvent&) {
  return NoCuda("CudaEvent::ElapsedMs");
}

absl::StatusOr<DeviceBuffer> AllocateDeviceBuffer(int64_t, int) {
  return NoCuda("AllocateDeviceBuffer");
}
absl::StatusOr<std::shared_ptr<Storage>> PinnedHostAllocator::Allocate(int64_t, int) {
  return NoCuda("PinnedHostAllocator::Allocate");
}

absl::StatusOr<HostRegistration> HostRegistration::Register(void*, int64_t nbytes, unsigned,
                                                            const HostRegistrationOptions&) {
  if (nbytes == 0) return HostRegistration();
  return NoCuda("HostRegistration::Register");
}
HostRegistration::HostRegistration(HostRegistration&& other) noexcept = default;
HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept = default;
HostRegistration::~HostRegistration() = default;
absl::Status HostRegistration::Release() {
  static_cast<void>(device_);  // the registering device, which only a CUDA build has
  chunks_.clear();
  return absl::OkStatus();
}

absl::Status PinStorage(Storage& storage, unsigned, const HostRegistrationOptions&) {
  if (storage.nbytes() == 0) return absl::OkStatus();
  return NoCuda("PinStorage");
}

}  // namespace sdrt

namespace sdrt {

absl::Status StridedCopyDevice(void*, const void*, int64_t, absl::Span<const int64_t>,
                               absl::Span<const int64_t>, absl::Span<const int64_t>, StreamHandle) {
  return absl::UnavailableError("StridedCopyDevice: sdrt was built without CUDA");
}

}  // namespace sdrt
