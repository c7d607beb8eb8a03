// The counting allocation functions of alloc_counter.h: glibc's allocator underneath
// (its __libc_* entry points, which the interposed names would otherwise reach only
// through themselves).
#include "sdrt/bench/alloc_counter.h"

#include <execinfo.h>
#include <link.h>
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* ptr);
}

namespace sdrt::bench {
namespace {

std::atomic<int64_t> news{0};
std::atomic<int64_t> mallocs{0};
std::atomic<int64_t> mpi_mallocs{0};
std::atomic<bool> tracing{false};
thread_local bool in_trace = false;

// The executable segments of the MPI library and its transport, found once.
struct CodeRange {
  uintptr_t begin = 0, end = 0;
};
constexpr int kMaxRanges = 32;
CodeRange mpi_code[kMaxRanges];
std::atomic<int> mpi_ranges{0};

bool IsMpiObject(const char* path) {
  const char* slash = std::strrchr(path, '/');
  const char* name = slash != nullptr ? slash + 1 : path;
  for (const char* prefix : {"libmpi", "libuc", "libfabric", "libhwloc", "libpmi"}) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

int AddMpiCode(dl_phdr_info* info, size_t, void* count) {
  int& n = *static_cast<int*>(count);
  if (info->dlpi_name == nullptr || !IsMpiObject(info->dlpi_name)) return 0;
  for (int i = 0; i < info->dlpi_phnum && n < kMaxRanges; ++i) {
    const ElfW(Phdr)& h = info->dlpi_phdr[i];
    if (h.p_type != PT_LOAD || (h.p_flags & PF_X) == 0) continue;
    const uintptr_t begin = info->dlpi_addr + h.p_vaddr;
    mpi_code[n++] = {begin, begin + h.p_memsz};
  }
  return 0;
}

bool FromMpi(const void* caller) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(caller);
  const int n = mpi_ranges.load(std::memory_order_acquire);
  for (int i = 0; i < n; ++i) {
    if (at >= mpi_code[i].begin && at < mpi_code[i].end) return true;
  }
  return false;
}

// Writes `size` and the caller's backtrace to stderr while tracing; allocates nothing
// (a nested allocation, e.g. the first backtrace's loading of libgcc, is not traced).
void Trace(const char* what, size_t size) {
  if (!tracing.load(std::memory_order_relaxed) || in_trace) return;
  in_trace = true;
  char line[96];
  const int n = std::snprintf(line, sizeof line, "== %s of %zu bytes, pid %d:\n", what, size,
                              static_cast<int>(getpid()));
  if (n > 0) (void)!write(STDERR_FILENO, line, static_cast<size_t>(n));
  void* frames[24];
  backtrace_symbols_fd(frames, backtrace(frames, 24), STDERR_FILENO);
  in_trace = false;
}

void CountNew(size_t size) {
  news.fetch_add(1, std::memory_order_relaxed);
  Trace("operator new", size);
}

void CountMalloc(const char* what, size_t size, const void* caller) {
  if (FromMpi(caller)) {
    mpi_mallocs.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  mallocs.fetch_add(1, std::memory_order_relaxed);
  Trace(what, size);
}

// operator new's contract: retry through the new handler, else throw.
void* NewOrThrow(size_t size, size_t alignment) {
  CountNew(size);
  if (size == 0) size = 1;
  for (;;) {
    void* p = alignment == 0 ? __libc_malloc(size) : __libc_memalign(alignment, size);
    if (p != nullptr) return p;
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* NewOrNull(size_t size, size_t alignment) noexcept {
  try {
    return NewOrThrow(size, alignment);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

AllocationCounts AllocationsSoFar() {
  static const bool found = [] {
    int n = 0;
    dl_iterate_phdr(AddMpiCode, &n);
    mpi_ranges.store(n, std::memory_order_release);
    return true;
  }();
  (void)found;
  return {news.load(std::memory_order_relaxed), mallocs.load(std::memory_order_relaxed),
          mpi_mallocs.load(std::memory_order_relaxed)};
}

void TraceAllocations(bool on) {
  if (on) {
    // The first backtrace loads libgcc (allocating): done here, untraced.
    in_trace = true;
    void* frame[1];
    (void)backtrace(frame, 1);
    in_trace = false;
  }
  tracing.store(on, std::memory_order_relaxed);
}

}  // namespace sdrt::bench

using sdrt::bench::NewOrNull;
using sdrt::bench::NewOrThrow;

void* operator new(size_t size) { return NewOrThrow(size, 0); }
void* operator new[](size_t size) { return NewOrThrow(size, 0); }
void* operator new(size_t size, const std::nothrow_t&) noexcept { return NewOrNull(size, 0); }
void* operator new[](size_t size, const std::nothrow_t&) noexcept { return NewOrNull(size, 0); }
void* operator new(size_t size, std::align_val_t a) {
  return NewOrThrow(size, static_cast<size_t>(a));
}
void* operator new[](size_t size, std::align_val_t a) {
  return NewOrThrow(size, static_cast<size_t>(a));
}
void* operator new(size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return NewOrNull(size, static_cast<size_t>(a));
}
void* operator new[](size_t size, std::align_val_t a, const std::nothrow_t&) noexcept {
  return NewOrNull(size, static_cast<size_t>(a));
}

void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { __libc_free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  __libc_free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  __libc_free(p);
}

// glibc's allocation functions, counted (free needs no counting: glibc's frees them all),
// each told apart by the code that called it.
extern "C" {

void* malloc(size_t size) noexcept {
  sdrt::bench::CountMalloc("malloc", size, __builtin_return_address(0));
  return __libc_malloc(size);
}

void* calloc(size_t count, size_t size) noexcept {
  sdrt::bench::CountMalloc("calloc", count * size, __builtin_return_address(0));
  return __libc_calloc(count, size);
}

void* realloc(void* ptr, size_t size) noexcept {
  sdrt::bench::CountMalloc("realloc", size, __builtin_return_address(0));
  return __libc_realloc(ptr, size);
}

void* memalign(size_t alignment, size_t size) noexcept {
  sdrt::bench::CountMalloc("memalign", size, __builtin_return_address(0));
  return __libc_memalign(alignment, size);
}

void* aligned_alloc(size_t alignment, size_t size) noexcept {
  sdrt::bench::CountMalloc("aligned_alloc", size, __builtin_return_address(0));
  return __libc_memalign(alignment, size);
}

int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  sdrt::bench::CountMalloc("posix_memalign", size, __builtin_return_address(0));
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

}  // extern "C"
