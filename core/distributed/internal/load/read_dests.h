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
// the plan lies in its dest's runs) starts in `dest`, in bytes, when its elements are one
// contiguous range of `dest`: a contiguous CPU dest, one run per dim (Shard, Replicate, a
// ShardedTensor box) and, after the segment's dim, dims the box and the dest hold whole.
// -1 otherwise (also for a sub-byte start that is not a whole byte, and for a dest of
// another dtype than the file's `dtype`: a cast).
int64_t ContiguousDestByte(const Segment& s, DType dtype, const Tensor& dest,
                           const ShardRuns& runs, IntSpan begin, IntSpan end);

// Copies the segments of one read out of its staging buffer into their dests: one memcpy
// where the segment is a contiguous range of a CPU dest, else a strided CopyRuns; a dest of
// another float dtype than the file's gets the segment converted on the CPU from the staging
// bytes, straight into a dense range of a CPU dest (one pass), else into a box then copied. With
// `stream` (a device load), the copies are enqueued on it and the buffer must stay
// untouched until they have run.
absl::Status CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                     const Tensor& buffer, int64_t base, StreamHandle stream);

// Lays out and allocates the fresh dests (meta until now: LocalTargetRules::allocate is
// false) in one arena, in the order of their first segment in the plan, so that a piece
// that follows another in its file follows it in memory (internal/fresh_arena.h).
absl::Status AllocateFreshDests(const ReadPlan& plan, std::vector<ReadDest>& dests, Device device);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_DESTS_H_
