// CUDA build of cuda/runtime.h (see runtime_nocuda.cc for the other one).
#include "sdrt/cuda/runtime.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/cuda_check.h"

namespace sdrt {
namespace {

cudaStream_t AsStream(StreamHandle s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t AsEvent(void* e) { return static_cast<cudaEvent_t>(e); }

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
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  (void)cudaGetLastError();
  auto fmt = [](int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); };
  return absl::StrCat("CUDA runtime ", fmt(runtime), ", driver ",
                      driver == 0 ? std::string("none") : fmt(driver));
}

absl::StatusOr<CudaStream> CudaStream::Create(int device) {
  SDRT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return CudaStream(stream, device);
}

CudaStream::CudaStream(CudaStream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)), device_(other.device_) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(AsStream(stream_));
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(AsStream(stream_));
}

absl::Status CudaStream::Synchronize() const {
  return SDRT_CUDA_STATUS(cudaStreamSynchronize(AsStream(stream_)));
}

absl::StatusOr<CudaEvent> CudaEvent::Create() {
  cudaEvent_t event = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  return CudaEvent(event);
}

CudaEvent::CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(AsEvent(event_));
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) (void)cudaEventDestroy(AsEvent(event_));
}

absl::Status CudaEvent::Record(StreamHandle stream) {
  return SDRT_CUDA_STATUS(cudaEventRecord(AsEvent(event_), AsStream(stream)));
}

absl::Status CudaEvent::Synchronize() const {
  return SDRT_CUDA_STATUS(cudaEventSynchronize(AsEvent(event_)));
}

absl::Status CudaEvent::Block(StreamHandle stream) const {
  return SDRT_CUDA_STATUS(cudaStreamWaitEvent(AsStream(stream), AsEvent(event_), 0));
}

absl::StatusOr<float> CudaEvent::ElapsedMs(const CudaEvent& start, const CudaEvent& end) {
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
  SDRT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* ptr = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, static_cast<size_t>(nbytes)));
  return Storage::Wrap(ptr, nbytes, Device::CUDA(device), StorageKind::kCudaDevice,
                       [](void* p) { (void)cudaFree(p); });
}

absl::StatusOr<std::shared_ptr<Storage>> PinnedHostAllocator::Allocate(int64_t nbytes) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PinnedHostAllocator: negative size ", nbytes));
  }
  if (nbytes == 0) {
    return Storage::Wrap(nullptr, 0, Device::CPU(), StorageKind::kPinnedHost, nullptr);
  }
  void* ptr = nullptr;
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&ptr, static_cast<size_t>(nbytes), cudaHostAllocPortable));
  return Storage::Wrap(ptr, nbytes, Device::CPU(), StorageKind::kPinnedHost,
                       [](void* p) { (void)cudaFreeHost(p); });
}

}  // namespace sdrt
