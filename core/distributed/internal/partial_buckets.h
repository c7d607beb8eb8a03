// Bucketed Partial reductions, for GatherStateDict and FullTensor (one DTensor, one
// bucket): the Partial mesh dims of many DTensors all-reduced with one collective per
// bucket and mesh dim, instead of one per DTensor and mesh dim. Not public API.
//
// DTensors reduce together when they share the mesh (the same DeviceMeshComm), the dtype
// and their reduction: the sequence of (mesh dim, reduce op) of their Partial mesh dims in
// MeshDimsToReplicate order. Each such group gets one allocation on the reduction's device
// holding copies of its members' local tensors back to back, in leaf order, with no gap
// (one dtype: every member starts at a multiple of the element size). A bucket is a run of
// consecutive members whose bytes reach at most `bucket_bytes` (one member alone may exceed
// it); the bucket's elements are one contiguous range of the group's allocation, all-reduced
// in place on each Partial mesh dim's communicator in turn. The reduced copies are views of
// that allocation, so nothing is unpacked afterwards.
//
// Why every rank of an all-reduce cuts the same buckets: the ranks of mesh dim d's
// communicator differ only in their coordinate on d, which is Partial for every member of
// the group, and a local shape depends only on the coordinates of Shard mesh dims; so the
// members' sizes, and the buckets cut from them, are the same on all those ranks. Groups
// are taken in the order of their first member and members in leaf order, which the
// agreement made the same on every rank.
//
// Elementwise reductions are unchanged by the concatenation: an element's result is that
// of the same ranks' values with the same op. (MPI may pick another reduction algorithm for
// a larger message; integer and exactly representable floating values reduce to the same
// bits either way, and the tests use those.)
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_PARTIAL_BUCKETS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_PARTIAL_BUCKETS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// One DTensor to reduce: the DTensor (validated: its local shape is the one its mesh,
// placements and this rank's coordinate give) and the DeviceMeshComm of its mesh over the
// call's communicator. Neither is owned; both outlive the call.
struct PartialInput {
  const DTensor* dtensor = nullptr;
  DeviceMeshComm* mesh_comm = nullptr;
};

// The local tensor of each input with its Partial mesh dims reduced, in input order; no
// entries at all when no input has a Partial mesh dim in MeshDimsToReplicate, and an
// undefined tensor for an input without one (its local is the result: a gather without
// Partial copies and allocates nothing per tensor here); else a contiguous view, on `device`, of
// its group's allocation (the views of a group share that storage, which lives while any of them
// does). The inputs are never written. Counts one collective per all-reduce in `stats` when not
// null. Collective over the Partial mesh dims' communicators (made by DeviceMeshComm::DimComm on
// first use, in the order the groups and their reductions are met). Errors: MeshDimsToReplicate's
// and DimComm's; ResourceExhausted when a group's allocation fails; the communicator's errors
// (AllReduce, comm/communicator.h). bucket_bytes >= 1.
absl::StatusOr<std::vector<Tensor>> ReducePartialsInBuckets(absl::Span<const PartialInput> inputs,
                                                            Device device, int64_t bucket_bytes,
                                                            CollectiveStats* stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_PARTIAL_BUCKETS_H_
