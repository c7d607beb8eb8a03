// The reading half of LoadStateDict (core/distributed/load_state_dict.h): a ReadPlan's
// reads, in order, with pread into a bounded pool of CPU staging buffers, each handed to
// a consumer on the calling thread. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_STAGED_READER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_STAGED_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/read_plan.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

struct StagedFile {
  std::string path;
  int64_t size = 0;  // the size the plan was made for
};

struct StagedReadStats {
  int64_t preads = 0;
  int64_t bytes_read = 0;
  int64_t peak_staging_bytes = 0;
};

// Called once per read, in plan order, on the calling thread: `buffer` (uint8, CPU) holds
// the read's bytes at [base, base + read.bytes), where base = read.offset % 16, so that a
// segment at file offset f sits at a buffer offset congruent to f modulo 16. The buffer is
// reused after the call returns.
using ConsumeRead =
    std::function<absl::Status(const Read& read, const Tensor& buffer, int64_t base)>;

// Opens every file a read names (read-only, by path), checks its size against
// files[i].size, and reads plan.reads into `buffers` (>= 1) buffers of
// min(buffer_bytes, largest read) + 16 bytes, allocated up front; with two or more
// buffers and reads, a reader thread fills the next buffers while `consume` runs. pread
// is retried on EINTR and continued after a short count. `name_of(segment)` names the
// tensor of a segment in messages. Errors: FailedPrecondition "<path>: size changed from A
// to B bytes"; DataLoss "<path>: short read at offset O (tensor 'T')"; the errno's code
// for open, fstat and pread ("<path>: pread at offset O (tensor 'T'): <strerror>");
// ResourceExhausted for a buffer; the first error of `consume` (reading stops).
absl::Status RunStagedReads(const std::vector<StagedFile>& files, const ReadPlan& plan,
                            const std::function<std::string(size_t segment)>& name_of, int buffers,
                            int64_t buffer_bytes, const ConsumeRead& consume,
                            StagedReadStats& stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_STAGED_READER_H_
