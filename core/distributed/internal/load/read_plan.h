// Read planning of LoadStateDict (core/distributed/load_state_dict.h): from the header of
// a checkpoint alone (each tensor's file, byte offset, shape and element bits) and the
// runs of global indices this rank keeps of each tensor (region_copy.h's ShardRuns), the
// byte runs to read, cut into boxes that fit one staging buffer, and coalesced into a few
// large reads per file. Pure arithmetic; nothing is read. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_PLAN_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// A gap between two runs of one file is read through (instead of starting a new read)
// when it is at most ReadPlanOptions::max_gap_bytes and at most 1/kGapDivisor of the run
// before it, so gaps add at most 1/32 to the bytes kept: read amplification <= 1.032.
inline constexpr int64_t kGapDivisor = 32;

struct ReadPlanOptions {
  int64_t max_gap_bytes = int64_t{1} << 20;     // >= 0
  int64_t max_read_bytes = int64_t{256} << 20;  // >= 16: one staging buffer
};

// One tensor to read part of. `runs` (per dim, global index runs) must lie in `shape`;
// a dim without runs, or runs of total length 0, means nothing is kept, and so does null
// runs (also for a 0-dim tensor). Both are borrowed (the checkpoint's header and the
// caller's targets hold them: nothing is copied per tensor) and must outlive the plan's
// use.
struct ReadTensor {
  int file = 0;
  int64_t offset = 0;    // absolute byte offset of element 0 in the file
  int element_bits = 8;  // ElementBits of the dtype, >= 1
  IntSpan shape;         // empty for a 0-dim tensor (one element)
  const ShardRuns* runs = nullptr;  // one entry per dim of `shape`, or null
};

// A box of one tensor that is one contiguous byte run of its file: indices fixed on the
// dims before `dim`, [begin[dim], begin[dim] + length) on `dim`, whole dims after it. A
// 0-dim tensor's one element has dim 0 and length 1.
struct Segment {
  size_t tensor = 0;        // index into the ReadTensors
  int64_t file_offset = 0;  // absolute
  int64_t bytes = 0;        // > 0
  int64_t first = 0;        // row-major linear index of the box's first element
  int dim = 0;
  int64_t length = 0;
};

// One pread: [offset, offset + bytes) of `file`, holding segments
// [first_segment, first_segment + segment_count) in file order.
struct Read {
  int file = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
  size_t first_segment = 0;
  size_t segment_count = 0;
};

struct ReadPlan {
  std::vector<Segment> segments;  // sorted by (file, file_offset)
  std::vector<Read> reads;        // in the same order; none longer than max_read_bytes
  int64_t kept_bytes = 0;         // the sum of the segments' bytes
  int64_t read_bytes = 0;         // the sum of the reads' bytes (kept + gaps read through)
};

// The segments of every tensor (a kept box is one segment per combination of kept indices
// on the dims before the last dim that is not kept whole, times that dim's runs; a segment
// above max_read_bytes is cut along its dim, or into segments of the next dim when one
// index of its dim is larger), then the reads: segments are taken in (file, offset) order
// and a segment joins the current read when it is in the same file, does not start before
// the read's end, its gap passes kGapDivisor's rule, and the read stays within
// max_read_bytes; cuts of sub-byte tensors fall on whole bytes. InvalidArgument for
// options out of range, a run outside its tensor's shape, runs of the wrong rank, an
// element larger than max_read_bytes, byte counts that overflow int64, or (sub-byte
// dtypes) a kept run that begins or ends inside a byte.
absl::StatusOr<ReadPlan> PlanReads(const std::vector<ReadTensor>& tensors,
                                   const ReadPlanOptions& options);

// The segments PlanReads makes of tensor `t` (as tensor `index`), none above
// max_read_bytes, appended to `out` in `t`'s row-major order; PlanReads' errors for `t`.
// A box that is one contiguous byte run of its file is one segment when it fits (what
// LoadOptions::map_results maps, internal/load/mapped_pieces.h).
absl::Status PlanTensorSegments(const ReadTensor& t, size_t index, int64_t max_read_bytes,
                                std::vector<Segment>& out);

// The global box [begin, end) of `segment` in a tensor of `shape`.
void SegmentBox(const Segment& segment, IntSpan shape, IntVector& begin, IntVector& end);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_READ_PLAN_H_
