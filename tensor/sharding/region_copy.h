// Moving a shard's elements between its local tensor and a box of the global tensor, on
// any device: the piece of a DTensor (owned index sets, docs/SEMANTICS.md 1.5) or of a
// ShardedTensor (metadata offsets and sizes) is described per global dim as runs of consecutive
// global indices, and every combination of runs is one strided copy of a rectangular block
// (Tensor::CopyFrom on views). A Shard or uneven piece is one run per dim, one copy; a
// _StridedShard piece has up to split_factor runs on its dim.
//
// Used by the gather (local piece -> full tensor), the broadcast (bucket -> local piece)
// and the distribute (full tensor -> local piece) of core/.
// Not API: plumbing shared across folders, in namespace sdrt::internal (hidden, never in
// libsdrt.so's exported symbols).
#ifndef SDRT_TENSOR_SHARDING_REGION_COPY_H_
#define SDRT_TENSOR_SHARDING_REGION_COPY_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Global indices [global, global + length) along one dim, held at local indices
// [local, local + length) of the shard.
struct IndexRun {
  int64_t global = 0;
  int64_t local = 0;
  int64_t length = 0;

  friend bool operator==(const IndexRun& a, const IndexRun& b) {
    return a.global == b.global && a.local == b.local && a.length == b.length;
  }
};

// The runs of one dim, in local order: one for a Shard or Replicate piece (kept inline),
// up to split_factor for _StridedShard.
using IndexRuns = absl::InlinedVector<IndexRun, 1>;

// Per global dim, the runs of a shard (four dims inline, so the common shard costs no
// allocation). For a rank in the mesh only.
using ShardRuns = absl::InlinedVector<IndexRuns, 4>;

// The runs `info` owns along each global dim, in local order (maximal runs of its
// OwnedIndices, without expanding a slice into a list). Precondition: info is of a rank
// in the mesh (global_offset has one entry per dim).
ShardRuns OwnedRuns(const LocalShardInfo& info);

// One run per dim: the box [offsets, offsets + sizes) of a ShardedTensor shard.
ShardRuns BoxRuns(IntSpan offsets, IntSpan sizes);

// The part of `runs` whose global indices lie in [begin[d], end[d]) on every dim d, with
// the local indices kept. Dims may come out with no run (nothing owned in the box).
// Precondition: begin and end have runs.size() entries.
ShardRuns ClipRuns(const ShardRuns& runs, IntSpan begin, IntSpan end);

// Number of elements the runs cover (product over dims of the summed lengths; 1 for 0-dim).
int64_t RunsNumel(const ShardRuns& runs);

// Copies between `box`, which holds the global elements [origin[d], origin[d] +
// box.size(d)) of every dim, and `local`, the shard's local tensor, the elements named by
// `runs` (which must lie within the box and within local's shape): into `local` when
// `to_local`, else into `box`. Both tensors have the same dtype and rank, any strides and
// any devices (Tensor::CopyFrom rules: each block is one CopyFrom on `stream`, blocking
// unless `non_blocking`, when the caller keeps both tensors' memory alive and unchanged
// until the stream has run the copies). InvalidArgument when a run falls outside either
// tensor (checked for every run before anything is copied, also when another dim has no
// run) or the dtypes or ranks differ.
absl::Status CopyRuns(const Tensor& box, IntSpan origin, const Tensor& local, const ShardRuns& runs,
                      bool to_local, bool non_blocking = false, StreamHandle stream = nullptr);

// The offset, in elements, of the first element `runs` cover in a row-major tensor of
// `shape`, when they cover one contiguous range of it in the order of their own row-major
// block (one run per dim, local indices from 0, every dim after the first one longer than
// 1 whole); -1 otherwise (and for runs covering nothing). `use_local` takes the runs'
// local indices instead of their global ones (the range in the shard's local tensor).
int64_t ContiguousRangeOffset(IntSpan shape, const ShardRuns& runs, bool use_local = false);

// A block of host memory holding elements contiguously (row-major) as `shape`, of the
// dtype of the tensor it is copied to or from: e.g. a piece's slot in a gathered or
// broadcast bucket, which the overloads below copy without making a tensor of it.
struct PackedBlock {
  void* data = nullptr;
  IntSpan shape;
};

// CopyRuns with one side a PackedBlock: the local side (gather's unpacking, broadcast's
// packing) or the box (broadcast's slicing). The tensor must be a CPU tensor of whole-byte
// elements. The same checks as CopyRuns: InvalidArgument for a run outside either side,
// ranks that differ, a CUDA or sub-byte tensor, and a tensor with a zero stride when it is
// written.
absl::Status CopyRuns(const Tensor& box, IntSpan origin, const PackedBlock& local,
                      const ShardRuns& runs, bool to_local);
absl::Status CopyRuns(const PackedBlock& box, IntSpan origin, const Tensor& local,
                      const ShardRuns& runs, bool to_local);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_SHARDING_REGION_COPY_H_
