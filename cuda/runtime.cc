// CUDA build of cuda/runtime.h (see runtime_nocuda.cc for the other one). Host
// registration is in host_registration.cc.
#include "sdrt/cuda/runtime.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/cuda/pinning_counts.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

cudaStream_t AsStream(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t AsEvent(void* e) { return static_cast<cudaEvent_t>(e); }

// Destroys or frees under a guard on `device`, where the object was made; errors are
// discarded (nobody can act on them in a destructor).
template <typename Call>
void OnDevice(int device, Call call) {
  internal::DeviceGuard guard;
  if (!guard.Enter(device).ok()) return;
  internal::DiscardCudaError(call());
}

}  // namespace

bool BuiltWithCuda() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

absl::Status CudaAvailable() {
  int count = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (count == 0) return absl::UnavailableError("no CUDA device");
  return absl::OkStatus();
}

std::string CudaVersionString() {
  int runtime = 0;
  int driver = 0;
  internal::DiscardCudaError(cudaRuntimeGetVersion(&runtime));
  internal::DiscardCudaError(cudaDriverGetVersion(&driver));
  auto fmt = [](int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); };
  return absl::StrCat("CUDA runtime ", fmt(runtime), ", driver ",
                      driver == 0 ? std::string("none") : fmt(driver));
}

absl::Status SetCurrentCudaDevice(int device) { return SDRT_CUDA_STATUS(cudaSetDevice(device)); }

absl::StatusOr<std::string> CudaPciBusId(int device) {
  char id[32] = {};  // "dddd:bb:dd.f" and its end, with room to spare
  SDRT_CUDA_RETURN_IF_ERROR(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof(id)), device));
  return std::string(id);
}

absl::StatusOr<CudaStream> CudaStream::Create(int device) {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  cudaStream_t stream = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(stream, device);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) {
      OnDevice(device_, [s = AsStream(stream_)] { return cudaStreamDestroy(s); });
    }
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) {
    OnDevice(device_, [s = AsStream(stream_)] { return cudaStreamDestroy(s); });
  }
}

absl::Status CudaStream::Synchronize() const {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  return SDRT_CUDA_STATUS(cudaStreamSynchronize(AsStream(stream_)));
}

absl::StatusOr<CudaEvent> CudaEvent::Create(int device, EventTiming timing) {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  cudaEvent_t event = nullptr;
  const unsigned flags =
      timing == EventTiming::kEnabled ? cudaEventDefault : cudaEventDisableTiming;
  SDRT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
  return CudaEvent(event, device);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) {
      OnDevice(device_, [e = AsEvent(event_)] { return cudaEventDestroy(e); });
    }
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) OnDevice(device_, [e = AsEvent(event_)] { return cudaEventDestroy(e); });
}

absl::Status CudaEvent::Record(StreamHandle stream) {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  return SDRT_CUDA_STATUS(cudaEventRecord(AsEvent(event_), AsStream(stream)));
}

absl::Status CudaEvent::Synchronize() const {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  return SDRT_CUDA_STATUS(cudaEventSynchronize(AsEvent(event_)));
}

absl::Status CudaEvent::Block(StreamHandle stream) const {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  return SDRT_CUDA_STATUS(cudaStreamWaitEvent(AsStream(stream), AsEvent(event_), 0));
}

absl::Status WaitForLegacyStream(int device, StreamHandle stream) {
  SDRT_ASSIGN_OR_RETURN(CudaEvent before, CudaEvent::Create(device, EventTiming::kDisabled));
  SDRT_RETURN_IF_ERROR(before.Record(nullptr));
  // The event may go once the wait is enqueued.
  return before.Block(stream);
}

absl::StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(start.device_));
  float ms = 0;
  SDRT_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, AsEvent(start.event_), AsEvent(end.event_)));
  return ms;
}

absl::StatusOr<DeviceBuffer> AllocateDeviceBuffer(int64_t nbytes, int device) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateDeviceBuffer: negative size ", nbytes));
  }
  if (nbytes == 0) {
    return Storage::Wrap(nullptr, 0, Device::CUDA(device), StorageKind::kCudaDevice, nullptr);
  }
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  void* ptr = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, static_cast<size_t>(nbytes)));
  return Storage::Wrap(ptr, nbytes, Device::CUDA(device), StorageKind::kCudaDevice,
                       [device](void* p) { OnDevice(device, [p] { return cudaFree(p); }); });
}

absl::StatusOr<std::shared_ptr<Storage>> PinnedHostAllocator::Allocate(int64_t nbytes, int device) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PinnedHostAllocator: negative size ", nbytes));
  }
  if (nbytes == 0) {
    return Storage::Wrap(nullptr, 0, Device::CPU(), StorageKind::kPinnedHost, nullptr);
  }
  SDRT_ASSIGN_OR_RETURN(const int on, internal::ResolveCudaDevice(device));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(on));
  void* ptr = nullptr;
  internal::CountPinnedAllocation();
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&ptr, static_cast<size_t>(nbytes), cudaHostAllocPortable));
  return Storage::Wrap(ptr, nbytes, Device::CPU(), StorageKind::kPinnedHost,
                       [on](void* p) { OnDevice(on, [p] { return cudaFreeHost(p); }); });
}

}  // namespace sdrt
