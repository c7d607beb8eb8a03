// The CUDA runtime as sdrt uses it: device queries, RAII streams, events and device
// buffers, pinned host memory (cudaHostAlloc) and host registration (cudaHostRegister).
//
// Devices. Every call runs under a guard on the device it is for (cuda/device_guard.h):
// it never leaves the caller on another device and never creates a CUDA context on a
// device the process has not used. Objects remember their device and destroy themselves
// on it. Host allocations and registrations are portable (usable from every device) but
// still need a context to run in: they take the device as a parameter, where
// kCurrentCudaDevice means the calling thread's current device.
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
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// True when sdrt was compiled with CUDA.
bool BuiltWithCuda();
// Number of visible CUDA devices; 0 without CUDA, driver or device.
int CudaDeviceCount();
// OK when at least one device can be used; Unavailable with the reason otherwise.
absl::Status CudaAvailable();
// "CUDA runtime 13.0, driver 13.0" / "built without CUDA" (for `sdrt --version`).
std::string CudaVersionString();

// Stands for "the calling thread's current device" (cudaGetDevice) where a device is asked.
inline constexpr int kCurrentCudaDevice = -1;

// Makes `device` the calling thread's current device (cudaSetDevice, which creates its
// primary context), as torch.cuda.set_device. A new thread starts on device 0: a thread
// that works for one device calls this first, so that nothing it does opens a context on
// device 0. InvalidArgument for an invalid ordinal; Unavailable without CUDA or a device.
absl::Status SetCurrentCudaDevice(int device);

// The PCI bus id of CUDA device `device` ("0000:19:00.0", cudaDeviceGetPCIBusId): the same
// for one GPU whatever CUDA_VISIBLE_DEVICES numbers it as, so ranks of one host can tell
// whether they were given one GPU. CUDA's error for an invalid ordinal; Unavailable
// without CUDA or a device.
absl::StatusOr<std::string> CudaPciBusId(int device);

// An owned, non-blocking CUDA stream on one device. Move-only; destroyed with the object
// (on its device).
class CudaStream {
 public:
  // A stream on `device`, created under a guard: the caller's current device is unchanged.
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

// Whether a CudaEvent records timestamps (ElapsedMs); without them recording and waiting
// are cheaper (cudaEventDisableTiming), which completion events want.
enum class EventTiming : bool { kDisabled = false, kEnabled = true };

// An owned CUDA event on one device. Move-only. Every call runs under a guard on the
// event's device, so Record(nullptr) records on THAT device's legacy default stream.
class CudaEvent {
 public:
  // An event on `device` (cudaEventCreateWithFlags under a guard).
  static absl::StatusOr<CudaEvent> Create(int device, EventTiming timing = EventTiming::kEnabled);
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  ~CudaEvent();
  // Records the event at the current tail of `stream`, a stream of the event's device
  // (nullptr: that device's legacy default stream). CUDA refuses a stream of another
  // device (InvalidArgument/Internal naming cudaEventRecord).
  absl::Status Record(StreamHandle stream);
  // Blocks the host until the recorded work is complete.
  absl::Status Synchronize() const;
  // Makes `stream` (of any device) wait for the recorded work (no host blocking).
  absl::Status Block(StreamHandle stream) const;
  // Milliseconds between two recorded, completed events of one device, both created with
  // EventTiming::kEnabled (CUDA's error otherwise).
  static absl::StatusOr<float> ElapsedMs(const CudaEvent& start, const CudaEvent& end);
  void* handle() const { return event_; }
  int device() const { return device_; }

 private:
  CudaEvent(void* event, int device) : event_(event), device_(device) {}
  void* event_ = nullptr;  // cudaEvent_t
  int device_ = 0;
};

// Makes `stream` (a stream of CUDA device `device`, usually non-blocking) wait for what is
// enqueued now on that device's legacy default stream, without blocking the host: an event
// recorded there and waited on (cudaStreamWaitEvent). So the caller's work there (PyTorch's
// default stream, and the blocking streams it waits for) runs before what the caller's
// callee enqueues on `stream` next. CUDA's errors; Unavailable without CUDA.
absl::Status WaitForLegacyStream(int device, StreamHandle stream);

// RAII device memory: a Storage on CUDA:device whose bytes are cudaFree'd when the last
// holder (buffer handle or tensor viewing it) lets go.
using DeviceBuffer = std::shared_ptr<Storage>;
// Uninitialised device memory (cudaMalloc under a guard on `device`; freed on it too).
// nbytes == 0 gives an empty buffer without calling CUDA. ResourceExhausted when the
// device is out of memory.
absl::StatusOr<DeviceBuffer> AllocateDeviceBuffer(int64_t nbytes, int device);

// Page-locked host memory from cudaHostAlloc (portable across devices), as a CPU Storage
// of kind kPinnedHost. nbytes == 0 gives an empty storage without calling CUDA.
class PinnedHostAllocator {
 public:
  // Allocates (and later frees) in `device`'s context, under a guard.
  static absl::StatusOr<std::shared_ptr<Storage>> Allocate(int64_t nbytes,
                                                           int device = kCurrentCudaDevice);
};

// Flags of cudaHostRegister, same values.
enum HostRegisterFlags : unsigned {
  kHostRegisterDefault = 0x0,
  kHostRegisterPortable = 0x1,
  kHostRegisterMapped = 0x2,
  kHostRegisterReadOnly = 0x8,
};

// HostRegistrationOptions::chunk_bytes by default (see there): 64 GiB.
inline constexpr int64_t kDefaultRegistrationChunkBytes = int64_t{64} << 30;

// How a host range is registered.
struct HostRegistrationOptions {
  // The device whose context runs the calls (under a guard) and whose attributes decide
  // kHostRegisterReadOnly (below).
  int device = kCurrentCudaDevice;
  // The range is registered in chunks of at most this many bytes (rounded up to whole
  // pages; chunk boundaries fall on page boundaries, cuda/registration_chunks.h): one
  // cudaHostRegister of 512 GiB or more fails on recent drivers. Must be >= 1. The default
  // registers anything under 64 GiB (every checkpoint file of a real model) whole: on an
  // H200 (CUDA 13.0, 2026-12-04) a file mapping registered in several chunks hung (tests:
  // SafetensorsGpu.PinMappingInSeveralChunks), where one registration of it works.
  int64_t chunk_bytes = kDefaultRegistrationChunkBytes;
  // Byte ranges (offset, nbytes), relative to the registered range, that no chunk boundary
  // may cut: the tensors of a file mapping or an arena. CUDA copies from registered memory
  // only within one registration (a cudaMemcpy across two returns cudaErrorInvalidValue,
  // read-only or not; measured on an H200, CUDA 13.0), so a tensor copied to the device
  // in one piece must lie in one chunk. A chunk grows past chunk_bytes only as far as it
  // must to keep a range whole. Each range must lie inside the registered range.
  std::vector<std::pair<int64_t, int64_t>> unbroken_ranges;
};

// Makes an existing host range page-locked for the GPU (cudaHostRegister, chunk by chunk)
// and undoes it (cudaHostUnregister of every chunk) when the object is destroyed or
// Release() is called. One object owns all chunks. A range of zero bytes is never
// registered (is_registered() false, every call OK). Move-only.
class HostRegistration {
 public:
  // Registers [ptr, ptr + nbytes) with `flags`. With kHostRegisterReadOnly the device must
  // report cudaDevAttrHostRegisterReadOnlySupported; a device that does not but reads
  // pageable memory through the host's page tables
  // (cudaDevAttrPageableMemoryAccessUsesHostPageTables) registers read-only pages without
  // the flag, and any other device gives FailedPrecondition before any registration (the
  // pages may be read-only, e.g. a PROT_READ mapping, which only that flag can register).
  // When a chunk fails, the chunks registered before it are unregistered and the error
  // names the chunk (index, offset, size) and CUDA's error: ResourceExhausted past the
  // locked-memory limit, Internal for cudaErrorHostMemoryAlreadyRegistered, ....
  // InvalidArgument for a negative size, a null pointer, chunk_bytes < 1 or an unbroken
  // range outside [0, nbytes).
  static absl::StatusOr<HostRegistration> Register(void* ptr, int64_t nbytes, unsigned flags,
                                                   const HostRegistrationOptions& options = {});
  HostRegistration() = default;
  HostRegistration(HostRegistration&& other) noexcept;
  HostRegistration& operator=(HostRegistration&& other) noexcept;
  ~HostRegistration();
  bool is_registered() const { return !chunks_.empty(); }
  // Chunks registered (0 after Release).
  int64_t num_chunks() const { return static_cast<int64_t>(chunks_.size()); }
  // Unregisters every chunk now, last first, on the registering device; returns the first
  // CUDA error (every chunk is attempted).
  absl::Status Release();

 private:
  std::vector<void*> chunks_;  // start of each registered chunk, in address order
  int device_ = 0;
};

// Registers all of `storage`'s bytes (a CPU storage: aligned, shared or mapped file) and
// ties the registration to the storage's lifetime: it is undone just before the bytes
// are released. No-op for zero bytes and for storages already pinned. Memory that CUDA
// already knows as page-locked (cudaPointerGetAttributes reports host memory for its first
// and last byte: a cudaHostAlloc buffer or a range someone else registered, such as a
// DLPack producer's) is marked pinned without a second registration and is not
// unregistered here (pinned, not owned). So is a range that only partly overlaps someone
// else's registration (a chunk's cudaHostRegister fails with
// cudaErrorHostMemoryAlreadyRegistered): the chunks registered before that one are
// unregistered again, nothing stays registered, and the storage is marked pinned with
// nothing to undo at release (its bytes outside that registration stay pageable). Errors
// as HostRegistration::Register, less that one; also InvalidArgument for device storages,
// Unavailable without CUDA or a device.
absl::Status PinStorage(Storage& storage, unsigned flags,
                        const HostRegistrationOptions& options = {});

// How many times sdrt has pinned host memory in this process, on every thread: cudaHostRegister
// calls (one per chunk of a HostRegistration or PinStorage, failed ones included) and
// cudaHostAlloc calls (PinnedHostAllocator, failed ones included). Both 0 in a build without
// CUDA. For checking that a loop pins nothing once warm (bench/sync_soak.cc: a bound reshard
// registers nothing per step).
struct HostPinningCounts {
  int64_t registrations = 0;
  int64_t allocations = 0;
};
HostPinningCounts HostPinningCountsSoFar();

}  // namespace sdrt

#endif  // SDRT_CUDA_RUNTIME_H_
