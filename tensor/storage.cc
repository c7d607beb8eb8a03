#include "sdrt/tensor/storage.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdrt/tensor/internal/cpu_block_cache.h"

namespace sdrt {
namespace {

absl::Status ErrnoError(absl::string_view call, absl::string_view what, int err) {
  return absl::InternalError(absl::StrCat(call, " failed for ", what, ": ", std::strerror(err)));
}

}  // namespace

absl::string_view StorageKindName(StorageKind kind) {
  switch (kind) {
    case StorageKind::kCpu:
      return "cpu";
    case StorageKind::kShared:
      return "shared";
    case StorageKind::kBorrowed:
      return "borrowed";
    case StorageKind::kPinnedHost:
      return "pinned";
    case StorageKind::kCudaDevice:
      return "cuda";
    case StorageKind::kMappedFile:
      return "mapped-file";
  }
  return "invalid";
}

Storage::Storage(void* data, int64_t nbytes, Device device, StorageKind kind, Release release)
    : data_(data), nbytes_(nbytes), device_(device), kind_(kind), release_(std::move(release)) {}

Storage::~Storage() {
  for (auto it = finalizers_.rbegin(); it != finalizers_.rend(); ++it) (*it)();
  if (release_) release_(data_);
}

void Storage::AddFinalizer(std::function<void()> finalizer, bool marks_pinned) {
  finalizers_.push_back(std::move(finalizer));
  if (marks_pinned) registered_ = true;
}

std::shared_ptr<Storage> Storage::Wrap(void* data, int64_t nbytes, Device device, StorageKind kind,
                                       Release release) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, kind, std::move(release)));
}

std::shared_ptr<Storage> Storage::Borrow(void* data, int64_t nbytes, Device device,
                                         Release release) {
  return Wrap(data, nbytes, device, StorageKind::kBorrowed, std::move(release));
}

absl::StatusOr<std::shared_ptr<Storage>> Storage::AllocateCpu(int64_t nbytes, int64_t alignment) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateCpu: negative size ", nbytes));
  }
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllocateCpu: alignment ", alignment, " is not a power of two"));
  }
  if (nbytes == 0) return Wrap(nullptr, 0, Device::CPU(), StorageKind::kCpu, nullptr);
  if (alignment < static_cast<int64_t>(sizeof(void*))) alignment = sizeof(void*);
  // Large buffers (buckets, gathered tensors) start on a 2 MiB boundary, so that a kernel
  // set to give transparent huge pages always can back them with whole ones, and come back
  // to a cache of blocks when released (a reused block's pages are already mapped). They do
  // not ask for huge pages (MADV_HUGEPAGE) where the kernel gives them on request only: on
  // this project's machine (bench/RESULTS.md, "Many tensors, many files, fresh processes")
  // the request made a fresh process's load and gather bimodal and up to 4x slower (the
  // kernel zeroing 2 MiB pages at first touch) and did not speed up the warm benchmarks.
  constexpr int64_t kHugePage = int64_t{2} << 20;
  const bool huge = nbytes >= kHugePage;
  if (huge && alignment < kHugePage) alignment = kHugePage;
  // aligned_alloc wants a size that is a multiple of the alignment.
  if (nbytes > std::numeric_limits<int64_t>::max() - (alignment - 1)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocateCpu: cannot allocate ", nbytes, " bytes"));
  }
  const int64_t rounded = (nbytes + alignment - 1) / alignment * alignment;
  if (huge && alignment == kHugePage) {
    // A block a released storage left in the cache (pages already mapped), or a new one;
    // either goes back to the cache when this storage is released.
    internal::CpuBlockCache& cache = internal::CpuBlockCache::Get();
    int64_t size = 0;
    void* data = cache.Take(rounded, &size);
    if (data == nullptr) {
      size = rounded;
      data = std::aligned_alloc(static_cast<size_t>(alignment), static_cast<size_t>(rounded));
      if (data == nullptr) {
        cache.Release();  // what the cache holds may be what is missing
        data = std::aligned_alloc(static_cast<size_t>(alignment), static_cast<size_t>(rounded));
      }
      if (data == nullptr) {
        return absl::ResourceExhaustedError(
            absl::StrCat("AllocateCpu: cannot allocate ", nbytes, " bytes"));
      }
    }
    return Wrap(data, nbytes, Device::CPU(), StorageKind::kCpu,
                [size](void* p) { internal::CpuBlockCache::Get().Give(p, size); });
  }
  void* data = std::aligned_alloc(static_cast<size_t>(alignment), static_cast<size_t>(rounded));
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocateCpu: cannot allocate ", nbytes, " bytes"));
  }
  return Wrap(data, nbytes, Device::CPU(), StorageKind::kCpu, [](void* p) { std::free(p); });
}

int64_t Storage::CachedCpuBytes() { return internal::CpuBlockCache::Get().cached_bytes(); }
int64_t Storage::CpuCacheLimit() { return internal::CpuBlockCache::Get().limit(); }
void Storage::SetCpuCacheLimit(int64_t bytes) { internal::CpuBlockCache::Get().SetLimit(bytes); }
int64_t Storage::ReleaseCpuCache() { return internal::CpuBlockCache::Get().Release(); }

absl::StatusOr<std::shared_ptr<Storage>> Storage::AllocateShared(int64_t nbytes) {
  if (nbytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("AllocateShared: negative size ", nbytes));
  }
  if (nbytes == 0) return Wrap(nullptr, 0, Device::CPU(), StorageKind::kShared, nullptr);
  // A random part keeps names unique against segments an earlier process with the same
  // pid left behind (containers reuse pids; a crash skips the unlink).
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  std::string name;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    name = absl::StrCat("/sdrt-", ::getpid(), "-",
                        absl::Hex(salt ^ (static_cast<uint64_t>(attempt) << 48)), "-",
                        counter.fetch_add(1));
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno != EEXIST) return ErrnoError("shm_open", name, errno);
  }
  if (fd < 0) return ErrnoError("shm_open", name, EEXIST);
  if (::ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
    const int err = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return ErrnoError("ftruncate", absl::StrCat(name, " (", nbytes, " bytes)"), err);
  }
  // ftruncate reserves nothing: without this, a /dev/shm too small for the segment shows
  // up as SIGBUS on first touch instead of an error here.
  int err = 0;
  do {
    err = ::posix_fallocate(fd, 0, static_cast<off_t>(nbytes));
  } while (err == EINTR);
  if (err != 0) {
    ::close(fd);
    ::shm_unlink(name.c_str());
    const std::string what = absl::StrCat(name, " (", nbytes, " bytes)");
    if (err == ENOSPC) {
      return absl::ResourceExhaustedError(absl::StrCat("posix_fallocate failed for ", what,
                                                       ": no space left in /dev/shm (",
                                                       std::strerror(err), ")"));
    }
    return ErrnoError("posix_fallocate", what, err);
  }
  void* data =
      ::mmap(nullptr, static_cast<size_t>(nbytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  err = errno;
  ::close(fd);
  if (data == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    return ErrnoError("mmap", absl::StrCat(name, " (", nbytes, " bytes)"), err);
  }
  auto storage = Wrap(data, nbytes, Device::CPU(), StorageKind::kShared, [name, nbytes](void* p) {
    ::munmap(p, static_cast<size_t>(nbytes));
    ::shm_unlink(name.c_str());
  });
  storage->shm_name_ = name;
  return storage;
}

}  // namespace sdrt
