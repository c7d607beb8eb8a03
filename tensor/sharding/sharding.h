// Sharding arithmetic of DTensor: which global indices each rank of a DeviceMesh holds
// under a list of placements, as torch.distributed.tensor computes it. Pure integer math
// (int64 throughout, sizes and offsets in elements); no tensors, no communication.
//
// Note [Owned index sets]: placements are applied left to right (mesh dim order). Along a
// tensor dim, a Shard keeps one contiguous piece of what the rank owned so far, a
// _StridedShard keeps up to split_factor pieces, so a rank owns a *set* of global indices
// per dim, and its local tensor is Full[I_0 x I_1 x ...] (docs/SEMANTICS.md 1.5's outer-product
// property). The .cc keeps each set as a few runs (start, size), so plain Shards never
// materialise index lists; only a set that is not one contiguous run is listed.
#ifndef SDRT_TENSOR_SHARDING_SHARDING_H_
#define SDRT_TENSOR_SHARDING_SHARDING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// ceil(n / k): the size of every piece but the trailing ones when a length-n dim is split
// into k pieces, and the size each piece is padded to for collectives (full_chunk_size in
// Shard._split_tensor). Preconditions: n >= 0, k >= 1. Never overflows.
constexpr int64_t ChunkSize(int64_t n, int64_t k) { return n / k + (n % k != 0 ? 1 : 0); }

// One piece of a split dim: `size` elements starting at `offset` (relative to the dim
// being split).
struct ChunkPiece {
  int64_t size;
  int64_t offset;
};

// Piece r of a length-n dim split into k pieces with torch.chunk semantics, padded with
// empty pieces to exactly k (docs/SEMANTICS.md 1.3): start = ChunkSize(n, k) * r, size clamped to
// [0, n - start], offset clamped to n (an empty trailing piece reports offset n). Mirrors
// Shard.local_shard_size_and_offset. Preconditions: n >= 0, k >= 1, 0 <= r < k.
ChunkPiece ShardPiece(int64_t n, int64_t k, int64_t r);

// Number of indices piece r gets when _StridedShard(dim, split_factor) splits a length-n
// dim over k ranks (docs/SEMANTICS.md 1.4): the sum over the split_factor pieces of n of their
// ShardPiece over k, in closed form: O(1), no allocation, whatever the split factor.
// Preconditions: n >= 0, k >= 1, split_factor >= 1, 0 <= r < k.
int64_t StridedShardSize(int64_t n, int64_t k, int64_t split_factor, int64_t r);

// The indices (in [0, n)) piece r gets under _StridedShard over k ranks, in local order:
// chunk [0, n) into split_factor pieces, chunk each into k sub-pieces, concatenate sub-piece
// r of every piece (docs/SEMANTICS.md 1.4). n=5, k=2, sf=2: r=0 -> [0, 1, 3], r=1 -> [2, 4].
// Mirrors _StridedShard.local_shard_size_and_offset(offset_mode=ALL). Same preconditions.
std::vector<int64_t> StridedShardIndices(int64_t n, int64_t k, int64_t split_factor, int64_t r);

// Where one rank's local tensor sits in the global tensor.
struct LocalShardInfo {
  // Shape of the local tensor, one entry per global dim; {0} for a rank not in the mesh.
  IntVector local_shape;
  // Per global dim, the first global index owned (0 for a dim no placement shards; the
  // global dim size for an empty shard of a sharded dim); empty for a rank not in the mesh.
  IntVector global_offset;
  // Empty when every dim owns one contiguous run (is_slice) and for a rank not in the
  // mesh; else per global dim the global indices owned along that dim, in local order,
  // when they are NOT one contiguous run, and an empty list when they are the run
  // [global_offset[d], global_offset[d] + local_shape[d]). See OwnedIndices to get the
  // list either way.
  std::vector<std::vector<int64_t>> index_lists;
  // True when every dim owns one contiguous run, i.e. the local tensor is the slice
  // (global_offset, local_shape) of the global tensor.
  bool is_slice = true;
};

// Local shape and global offset of `rank`'s shard of a DTensor of `global_shape`, plus
// its owned index sets (Note [Owned index sets]). Mirrors
// torch.distributed.tensor._utils.compute_local_shape_and_global_offset (index-list
// composition; docs/SEMANTICS.md 1.5): Replicate and Partial leave the shape alone, each shard-like
// placement re-splits what the rank owns along its dim, an empty shard reports offset =
// global dim size. A rank not in the mesh gets local_shape {0} and an empty offset, as
// PyTorch returns ((0,), ()). Cost: O(sum of split factors) per placement, plus the size
// of the index lists it returns. InvalidArgument when placements.size() != mesh.ndim(), a
// global dim is negative, a shard dim is not in [0, global_shape.size()) or a split factor
// is below 1.
absl::StatusOr<LocalShardInfo> ComputeLocalShapeAndGlobalOffset(
    IntSpan global_shape, const DeviceMesh& mesh, const std::vector<Placement>& placements,
    int64_t rank);

// Only the local shape ({0} for a rank not in the mesh); no allocation beyond the result.
// Mirrors compute_local_shape_and_global_offset(..., skip_offset=True). Same errors.
absl::StatusOr<IntVector> ComputeLocalShape(IntSpan global_shape, const DeviceMesh& mesh,
                                            const std::vector<Placement>& placements, int64_t rank);

// The global indices `info` owns along global dim `dim`, in local order, whether or not
// they are a contiguous run: the reference, one index at a time, that OwnedRuns
// (region_copy.h) is tested against and that tests use to check pieces element by
// element. Precondition: 0 <= dim < info.global_offset.size().
std::vector<int64_t> OwnedIndices(const LocalShardInfo& info, int dim);

// Product of the mesh sizes of the shard-like mesh dims (DTensorSpec.num_shards).
// Precondition: placements.size() == mesh.ndim().
int64_t NumShards(const DeviceMesh& mesh, const std::vector<Placement>& placements);

// The mesh dims to turn into Replicate for full_tensor(), in processing order
// (docs/SEMANTICS.md 2 steps 2-3): last to first when NumShards > 1, else first to last; Replicate
// dims and size-1 mesh dims are left out. InvalidArgument when placements.size() != mesh.ndim().
absl::StatusOr<std::vector<int>> MeshDimsToReplicate(const DeviceMesh& mesh,
                                                     const std::vector<Placement>& placements);

// Checks that `local_shape` is what `rank` must hold for a DTensor of `global_shape`
// (ComputeLocalShape). A rank not in the mesh must hold zero elements. InvalidArgument
// naming `name` (e.g. the state-dict key; may be empty), the rank, its mesh coordinate,
// the expected and the actual local shape otherwise, plus the errors of ComputeLocalShape.
absl::Status ValidateLocalShape(IntSpan local_shape, IntSpan global_shape, const DeviceMesh& mesh,
                                const std::vector<Placement>& placements, int64_t rank,
                                absl::string_view name = "");

}  // namespace sdrt

#endif  // SDRT_TENSOR_SHARDING_SHARDING_H_
