// A process-wide count of heap allocations, for bench/sync_soak.cc: linking alloc_counter.cc
// into a program replaces, in that program only, the global operator new (every form:
// plain, array, nothrow, aligned) and delete (every form), and interposes glibc's malloc,
// calloc, realloc, aligned_alloc, posix_memalign and memalign (an executable's definitions
// win over libc's for every library it loads, MPI's too). Each counting function calls
// glibc's own allocator (__libc_malloc, __libc_memalign, ...), so an operator new is counted
// once, as a `new`, not also as a malloc. Counted on every thread. A malloc called from the
// code of the MPI library or the transport under it (a loaded object whose file name starts
// with libmpi, libuc, libfabric, libhwloc or libpmi: MPICH's own allocations, e.g. the
// schedule of each MPI_Iallreduce) is counted apart, as `mpi_mallocs`; one called from
// elsewhere in its behalf (libc's strdup) counts as sdrt's. Not counted: mmap and other
// allocators that do not go through these functions (cudaHostAlloc, a file mapping). Not
// for sanitizer builds, which replace the same functions.
#ifndef SDRT_BENCH_ALLOC_COUNTER_H_
#define SDRT_BENCH_ALLOC_COUNTER_H_

#include <cstdint>

namespace sdrt::bench {

struct AllocationCounts {
  int64_t news = 0;         // operator new / new[] calls, every form
  int64_t mallocs = 0;      // malloc, calloc, realloc, aligned_alloc, posix_memalign, memalign
  int64_t mpi_mallocs = 0;  // those called from the MPI library's code
  // What sdrt (and any code but MPI's) allocated.
  int64_t outside_mpi() const { return news + mallocs; }
};

// The calls so far in this process, on every thread. The first call finds the MPI library's
// code (dl_iterate_phdr); mallocs before it all count as `mallocs`.
AllocationCounts AllocationsSoFar();

// The counts from `before` to now.
inline AllocationCounts AllocationsSince(const AllocationCounts& before) {
  const AllocationCounts now = AllocationsSoFar();
  return {now.news - before.news, now.mallocs - before.mallocs,
          now.mpi_mallocs - before.mpi_mallocs};
}

// While on, every counted call but MPI's also writes its size and a backtrace (glibc's
// backtrace_symbols_fd, which allocates nothing) to stderr, for finding where a step
// allocates. Off by default.
void TraceAllocations(bool on);

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_ALLOC_COUNTER_H_
