// The reading half of LoadStateDict (core/distributed/load_state_dict.h): a ReadPlan's
// reads, in order, with pread into a bounded pool of CPU staging buffers, each handed to
// a consumer on the calling thread. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_STAGED_READER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_STAGED_READER_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/core/io/internal/open_regular_file.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

struct StagedFile {
  std::string path;
  FileIdentity opened;  // the file the plan was made for (its size included)
};

struct StagedReadStats {
  int64_t preads = 0;
  int64_t bytes_read = 0;
  int64_t peak_staging_bytes = 0;
  double staging_seconds = 0;  // allocating the staging buffers (StagingPool::allocate)
};

// The staging buffers and how the consumer uses them.
struct StagingPool {
  int buffers = 2;                        // >= 1
  // Reader threads (>= 1) reading batches of reads at the same time, each into a buffer of
  // its own (the pool then has at least readers + 1 buffers) or straight to the reads'
  // targets; the consumer still gets the reads in plan order.
  int readers = 1;
  int64_t buffer_bytes = int64_t{256} << 20;  // the longest read
  // Allocates one buffer of `nbytes` (a uint8 CPU tensor: pinned when the consumer copies
  // to a device). Empty: Tensor::Empty (pageable).
  std::function<absl::StatusOr<Tensor>(int64_t nbytes)> allocate;
  // Called on the reading thread before buffer `index` is filled again (its previous read
  // consumed); starts whatever asynchronous work of the consumer's on it is still only
  // planned (a device load's copies, which it joins over the reads of one buffer) and
  // blocks until all of it (a device copy) is complete. Its error ends the reading like a
  // read error. Empty: nothing to wait for.
  std::function<absl::Status(size_t index)> before_refill;
  // Open the files with O_DIRECT (the page cache is bypassed: for cold storage) and read
  // whole 4096-byte blocks into 4096-aligned buffers: a read is widened to the blocks
  // around it (the widening counts as bytes read). A file system that refuses O_DIRECT is
  // InvalidArgument naming the file.
  bool direct_io = false;
  // Called once on the calling thread before the buffers are released, whatever the
  // outcome: waits for all of the consumer's asynchronous work. Empty: nothing to wait for.
  std::function<absl::Status()> drain;
};

// The buffers a pool of `buffers` and `readers` (StagingPool's) has at most: each reader
// thread fills one while the consumer copies out of another.
inline int PoolBuffers(int buffers, int readers) {
  return readers > 1 ? std::max(buffers, readers + 1) : buffers;
}

// Called once per read, in plan order, on the calling thread: `buffer` (uint8, CPU; the
// pool's buffer `index`) holds the read's bytes at [base, base + read.bytes), where base
// is congruent to read.offset modulo 16 (equal to read.offset % 4096 with direct_io), so
// that a segment at file offset f sits at a buffer offset congruent to f modulo 16. For a
// read that went to its DirectTarget, `buffer` is undefined and `index` meaningless. The
// buffer is refilled after the calls for all the reads it holds have returned and
// pool.before_refill(index) has returned.
using ConsumeRead = std::function<absl::Status(const Read& read, const Tensor& buffer,
                                               int64_t base, size_t index)>;

// Where a read may be pread instead of into a staging buffer: read.bytes bytes of CPU
// memory that nothing else touches during the call, or nullptr to stage it. Called on the
// calling thread for every read before anything is read; consecutive direct reads are
// read in batches of about 1 MiB (one handoff between the threads per batch). `consume`
// is still called for such a read, in order, with an undefined `buffer`. Not used with
// direct_io.
using DirectTarget = std::function<uint8_t*(const Read& read)>;

// Opens each file a read names when its first read comes (read-only, by path; O_DIRECT with
// pool.direct_io; at most 64 open at once over all the readers, the one a reader opened
// longest ago closed first, so a
// folder of any number of files loads under a process's open-file limit), checks its size
// against files[i].size, and reads plan.reads into pool.buffers buffers of
// min(pool.buffer_bytes, max(largest staged read, min(1 MiB, sum of (staged read + 16))))
// + 16 bytes (with direct_io: min(pool.buffer_bytes, largest read) + 3 x 4096, one read
// per buffer), allocated up front (none when every read has a direct target),
// consecutive reads sharing a buffer while they fit (a read with a direct target is not
// staged); with two or more buffers, or pool.readers > 1, pool.readers threads fill the next
// buffers (and read the direct reads) while `consume` runs. pread is retried on EINTR and
// continued after a short count. `name_of(segment)` names the tensor of a segment in
// messages. Errors: CheckSameFile's DataLoss for a file that is no longer the one opened
// (replaced, or its size changed); DataLoss "<path>: short read at offset O (tensor
// 'T')"; the errno's code for open, fstat and pread ("<path>: pread at offset O (tensor
// 'T'): <strerror>"); InvalidArgument for a file
// system that refuses O_DIRECT; ResourceExhausted for a buffer (or the allocator's
// error); the first error of `consume`, `before_refill` or `drain` (reading stops).
absl::Status RunStagedReads(const std::vector<StagedFile>& files, const ReadPlan& plan,
                            const std::function<std::string(size_t segment)>& name_of,
                            const StagingPool& pool, const ConsumeRead& consume,
                            StagedReadStats& stats, const DirectTarget& direct = {});

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_STAGED_READER_H_
