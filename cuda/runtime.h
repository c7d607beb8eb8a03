// The CUDA runtime as sdrt uses it: device queries, RAII streams, events and device
// buffers, pinned host memory (cudaHostAlloc) and host registration (cudaHostRegister).
//
// No CUDA header is included: handles are opaque (StreamHandle is a cudaStream_t). In
// a build without CUDA every call returns absl::UnavailableError("built without CUDA")
// and CudaDeviceCount() is 0. In a CUDA build on a machine without a GPU the calls return
// Unavailable naming CUDA's error (cudaErrorNoDevice, cudaErrorInsufficientDriver).
#ifndef SDRT_CUDA_RUNTIME_H_
#define SDRT_CUDA_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/storage.h"

namespace sdrt {

// True when sdrt was compiled with CUDA.
bool BuiltWithCuda();
// Number of visible CUDA devices; 0 without CUDA, driver or device.
int CudaDeviceCount();
// OK when at least one device can be used; Unavailable with the reason otherwise.
absl::Status CudaAvailable();
// "CUDA runtime 13.0, driver 13.0" / "built without CUDA" (for `sdrt --version`).
std::string CudaVersionString();

// An owned, non-blocking CUDA stream on one device. Move-only; destroyed with the object.
class CudaStream {
 public:
  static absl::StatusOr<CudaStream> Create(int device);
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  ~CudaStream();
  StreamHandle handle() const { return stream_; }
  int device() const { return device_; }
  // Blocks until all work enqueued so far has finished; returns its first error.
  absl::Status Synchronize() const;

 private:
  CudaStream(StreamHandle stream, int device) : stream_(stream), device_(device) {}
  StreamHandle stream_ = nullptr;
  int device_ = 0;
};

// An owned CUDA event (timing enabled). Move-only.
class CudaEvent {
 public:
  static absl::StatusOr<CudaEvent> Create();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  ~CudaEvent();
  // Records the event at the current tail of `stream`.
  absl::Status Record(StreamHandle stream);
  // Blocks the host until the recorded work is complete.
  absl::Status Synchronize() const;
  // Makes `stream` wait for the recorded work (no host blocking).
  absl::Status Block(StreamHandle stream) const;
  // Milliseconds between two recorded, completed events.
  static absl::StatusOr<float> ElapsedMs(const CudaEvent& start, const CudaEvent& end);
  void* handle() const { return event_; }

 private:
  explicit CudaEvent(void* event) : event_(event) {}
  void* event_ = nullptr;  // cudaEvent_t
};

// RAII device memory: a Storage on CUDA:device whose bytes are cudaFree'd when the last
// holder (buffer handle or tensor viewing it) lets go.
using DeviceBuffer = std::shared_ptr<Storage>;
// Uninitialised device memory (cudaMalloc). nbytes == 0 gives an empty buffer without
// calling CUDA. ResourceExhausted when the device is out of memory.
absl::StatusOr<DeviceBuffer> AllocateDeviceBuffer(int64_t nbytes, int device);

// Page-locked host memory from cudaHostAlloc (portable across devices), as a CPU Storage
// of kind kPinnedHost. nbytes == 0 gives an empty storage without calling CUDA.
class PinnedHostAllocator {
 public:
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t nbytes);
};

// Flags of cudaHostRegister, same values.
enum HostRegisterFlags : unsigned {
  kHostRegisterDefault = 0x0,
  kHostRegisterPortable = 0x1,
  kHostRegisterMapped = 0x2,
  kHostRegisterReadOnly = 0x8,
};

// Makes an existing host range page-locked for the GPU (cudaHostRegister) and undoes it
// (cudaHostUnregister) when the object is destroyed or Release() is called. A range of
// zero bytes is never registered (is_registered() false, every call OK). Move-only.
class HostRegistration {
 public:
  static absl::StatusOr<HostRegistration> Register(void* ptr, int64_t nbytes, unsigned flags);
  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  ~HostRegistration();
  bool is_registered() const { return ptr_ != nullptr; }
  // Unregisters now; returns CUDA's error if cudaHostUnregister fails.
  absl::Status Release();

 private:
  HostRegistration(void* ptr, int64_t nbytes) : ptr_(ptr), nbytes_(nbytes) {}
  void* ptr_ = nullptr;
  int64_t nbytes_ = 0;
};

// Registers all of `storage`'s bytes (a CPU storage: aligned, shared or mapped file) and
// ties the registration to the storage's lifetime: it is undone just before the bytes
// are released. No-op for zero bytes and for storages already pinned. InvalidArgument
// for device storages; Unavailable without CUDA or a device.
absl::Status PinStorage(Storage& storage, unsigned flags);

}  // namespace sdrt

#endif  // SDRT_CUDA_RUNTIME_H_
