// Storage: a range of bytes on one device, how it was obtained, and how to give it back.
//
// Tensors hold a std::shared_ptr<Storage> plus an element offset, so one allocation (an
// arena) can back many tensors; the bytes are released when the last tensor and the
// last other holder let go. Allocators:
//   - aligned CPU memory (AllocateCpu),
//   - POSIX shared memory (AllocateShared: shm_open + mmap; the name is reported and
//     unlinked on release),
//   - borrowed memory (Borrow: an outside pointer with an optional deleter, zero copy),
//   - pinned host, registered host and CUDA device memory come from cuda/, which builds
//     them with Storage::Wrap.
#ifndef SDRT_TENSOR_STORAGE_H_
#define SDRT_TENSOR_STORAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/device.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// How the bytes were obtained; printed by ToString and used by tests and `sdrt inspect`.
enum class StorageKind : uint8_t {
  kCpu,         // aligned_alloc
  kShared,      // POSIX shared memory
  kBorrowed,    // someone else's pointer
  kPinnedHost,  // cudaHostAlloc
  kCudaDevice,  // cudaMalloc
  kMappedFile,  // a private mmap of a file (read-only: the safetensors reader; writable,
                // copy on write: LoadOptions::map_results)
};
absl::string_view StorageKindName(StorageKind kind);

class Storage {
 public:
  // Called once with the data pointer when the storage is destroyed.
  using Release = std::function<void(void* data)>;

  // Default alignment of CPU and shared allocations, in bytes: enough for 16-byte
  // vector copies and for cudaHostRegister-friendly page-relative layouts.
  static constexpr int64_t kDefaultAlignment = 256;

  // Uninitialised CPU memory of `nbytes` bytes aligned to `alignment` (a power of two).
  // nbytes == 0 gives a storage with a null data pointer. ResourceExhausted when the
  // allocation fails, InvalidArgument for negative sizes or a bad alignment.
  // Blocks of 2 MiB and more start on a 2 MiB boundary (no MADV_HUGEPAGE request: a
  // kernel giving huge pages always backs them with whole ones), and come from the
  // process's CPU cache: when such a storage is released its block is
  // kept (up to CpuCacheLimit() bytes in all, the largest evicted first) and reused by the
  // next allocation of the same size up to 5/4 of it, whose pages are then already mapped
  // (a repeated gather, broadcast or weight sync touches no fresh pages). The memory stays
  // the process's until ReleaseCpuCache() or SetCpuCacheLimit(0).
  static absl::StatusOr<std::shared_ptr<Storage>> AllocateCpu(
      int64_t nbytes, int64_t alignment = kDefaultAlignment);

  // Zero-filled POSIX shared memory of `nbytes` bytes (page aligned). The segment's name
  // ("/sdrt-<pid>-<random>-<n>") is reported by shm_name() so that another process can
  // open it while this storage lives; the name is unlinked and the mapping removed on
  // release. The pages are reserved up front (posix_fallocate), so a full /dev/shm is
  // ResourceExhausted here, never SIGBUS later. nbytes == 0 maps nothing (null data, empty
  // name). Internal error with errno text when shm_open, ftruncate or mmap fails.
  static absl::StatusOr<std::shared_ptr<Storage>> AllocateShared(int64_t nbytes);

  // Zero-copy view of memory owned by someone else. `release`, if set, is called with
  // `data` when the storage is destroyed (a DLPack deleter, a munmap...). The caller
  // keeps the memory valid until then.
  static std::shared_ptr<Storage> Borrow(void* data, int64_t nbytes, Device device,
                                         Release release = nullptr);

  // General constructor used by allocators outside tensor/ (cuda/, the file reader).
  static std::shared_ptr<Storage> Wrap(void* data, int64_t nbytes, Device device, StorageKind kind,
                                       Release release);

  // The CPU cache above: the bytes it holds now, its limit (default 1 GiB, or an eighth of
  // the machine's memory when less), a new limit (0 disables it; cached blocks beyond the
  // limit are freed at once), and freeing everything it holds (returns the bytes freed).
  // Thread-safe.
  static int64_t CachedCpuBytes();
  static int64_t CpuCacheLimit();
  static void SetCpuCacheLimit(int64_t bytes);
  static int64_t ReleaseCpuCache();

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }  // bytes
  Device device() const { return device_; }
  StorageKind kind() const { return kind_; }
  const std::string& shm_name() const { return shm_name_; }

  // True when the host bytes are page-locked for the GPU, either because they came from
  // cudaHostAlloc or because a registration (cuda/HostRegistration) is attached.
  bool is_pinned() const { return kind_ == StorageKind::kPinnedHost || registered_; }

  // Runs `finalizer` before the bytes are released (finalizers run last-added first).
  // cuda/ attaches cudaHostUnregister this way. Marks the storage pinned when
  // `marks_pinned` is true. Not thread-safe against concurrent AddFinalizer calls.
  void AddFinalizer(std::function<void()> finalizer, bool marks_pinned);

  // Records that the bytes are already page-locked by their owner (a DLPack producer's
  // kDLCUDAHost buffer, a range another library registered): is_pinned() becomes true, and
  // nothing is unregistered at release, since sdrt did not register them.
  void MarkPinned() { registered_ = true; }

 private:
  Storage(void* data, int64_t nbytes, Device device, StorageKind kind, Release release);

  void* data_;
  int64_t nbytes_;
  Device device_;
  StorageKind kind_;
  Release release_;
  std::string shm_name_;
  bool registered_ = false;
  std::vector<std::function<void()>> finalizers_;
};

}  // namespace sdrt

#endif  // SDRT_TENSOR_STORAGE_H_
