// Sharding a sub-byte tensor (4- and 6-bit elements, tensor/dtype.h): a piece can be
// moved only when every run of adjacent elements it takes from the full tensor begins and
// ends on a byte boundary. These checks name the tensor and the cut before any byte moves;
// the layers below (Tensor's views, the read plan, the collectives) refuse the same pieces
// with a Status of their own.
// Not API: plumbing shared across folders, in namespace sdrt::internal (hidden, never in
// libsdrt.so's exported symbols).
#ifndef SDRT_TENSOR_SHARDING_BYTE_CUTS_H_
#define SDRT_TENSOR_SHARDING_BYTE_CUTS_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/sharding/region_copy.h"

namespace sdrt::internal {

// The first global dim at which the piece `runs` of a row-major tensor of `shape` and
// `dtype` would begin or end a run of adjacent elements inside a byte, or -1 when it
// never does (always -1 for whole-byte dtypes and for pieces without elements). A piece
// counts as cut at dim d when a run on d starts at a bit offset that is not whole, when a
// run on the innermost dim the piece does not keep whole has a length of a fractional
// number of bytes, or when consecutive indices of an outer dim are a fractional number of
// bytes apart. Preconditions: runs has one entry per dim of shape and lies within it.
int FirstSubByteCut(DType dtype, IntSpan shape, const ShardRuns& runs);

// OK unless some rank's piece of a tensor of `shape` under `placements` on `mesh` is cut
// inside a byte (FirstSubByteCut). Then InvalidArgument naming the tensor, its dtype and
// shape, the placements, every rank's piece size along the dim, and the rule:
//   tensor 'w' (float4_e2m1fn_x2 [4, 8]): Shard(1) over 3 ranks gives pieces of 3, 3, 2
//   elements along dim 1; a 4-bit element cannot be cut inside a byte
// `name` may be empty (then "tensor (...)"). Errors of ComputeLocalShapeAndGlobalOffset
// are returned as they are.
absl::Status CheckShardingCutsWholeBytes(absl::string_view name, DType dtype, IntSpan shape,
                                         const DeviceMesh& mesh,
                                         const std::vector<Placement>& placements);

// OK unless the box [offsets, offsets + sizes) of a tensor of `shape` (a ShardedTensor
// shard) is cut inside a byte; then InvalidArgument naming the tensor, the box and the
// dim.
absl::Status CheckBoxCutsWholeBytes(absl::string_view name, DType dtype, IntSpan shape,
                                    IntSpan offsets, IntSpan sizes);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_SHARDING_BYTE_CUTS_H_
