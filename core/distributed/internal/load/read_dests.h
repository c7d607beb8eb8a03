// The destinations of LoadStateDict's kAll reads (internal/load/load_all.cc): which local
// tensor each planned tensor fills, the copies of a read's segments out of a staging buffer,
// and the one arena of the fresh locals. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_DESTS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_DESTS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Which dest of which target each ReadTensor fills.
struct ReadDest {
  LocalTarget* target = nullptr;
  const CheckpointSourceTensor* tensor = nullptr;
  size_t dest = 0;
  const ShardRuns* runs = nullptr;  // the runs the dest holds (the target's)
};

// Where the box [begin, end) of segment `s` (which lies in `runs`, as every segment of
// the plan lies in its dest's runs) starts in `dest`, in bytes from dest.data_ptr(), when
// its elements are one contiguous range of `dest` (on any device): one run per dim
// (Shard, Replicate, a ShardedTensor box), dims after the segment's dim whole in the box
// and the dest, and from the segment's dim on dest's strides dense (a contiguous dest, or
// the rows of a dest whose rows are dense: the caller's view of a wider buffer). -1
// otherwise (also for a meta dest, a sub-byte start that is not a whole byte, and a dest of
// another dtype than the file's `dtype`: a cast).
int64_t ContiguousDestByte(const Segment& s, DType dtype, const Tensor& dest,
                           const ShardRuns& runs, IntSpan begin, IntSpan end);

// Copies segment `i` (of `read`) out of the staging buffer holding the read's bytes at
// [base, base + read.bytes) into its dest: one memcpy where the segment is a contiguous
// range of a CPU dest, else a strided CopyRuns (from a view of the buffer, or from a CPU
// box holding its bytes when it is not aligned to its element); a dest of another float
// dtype than the file's gets the segment converted on the CPU from the staging bytes,
// straight into a dense range of a CPU dest (one pass), else into a box then copied. With
// `stream` (a device load: DeviceStaging::CopyOut's segments that device_copies.h leaves),
// copies to a device are enqueued on it and the buffer must stay untouched until they have
// run (a CPU box is copied out of before the call returns).
absl::Status CopySegment(const ReadPlan& plan, const std::vector<ReadDest>& dests,
                         const Read& read, size_t i, const Tensor& buffer, int64_t base,
                         StreamHandle stream);

// CopySegment for each segment of `read`, without a stream: a load into CPU locals.
absl::Status CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                     const Tensor& buffer, int64_t base);

// Lays out and allocates the fresh dests (meta until now: LocalTargetRules::allocate is
// false) in one arena, in the order of their first segment in the plan, so that a piece
// that follows another in its file follows it in memory (internal/fresh_arena.h).
absl::Status AllocateFreshDests(const ReadPlan& plan, std::vector<ReadDest>& dests, Device device);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_DESTS_H_
