// Collectives over DTensor and ShardedTensor for CPU tensors: make a DTensor out of a full
// tensor or out of this rank's local piece, and gather either kind back into the full
// tensor on every rank (SPEC 1.5, 1.6, 2 and 3). Built only with MPI (SDRT_HAVE_MPI).
//
// Every function that takes a communicator is collective over it: every rank calls it with
// matching arguments. Metadata errors found after an exchange (FromLocal,
// GatherShardedTensor) are seen by every rank alike, so every rank returns the same error.
// Ranks are the communicator's; a mesh's ranks are ranks of that communicator.
#ifndef SDRT_CORE_DTENSOR_OPS_H_
#define SDRT_CORE_DTENSOR_OPS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "core/device_mesh_comm.h"
#include "tensor/device_mesh.h"
#include "tensor/dtensor.h"
#include "tensor/placement.h"
#include "tensor/sharded_tensor.h"
#include "tensor/tensor.h"

namespace sdrt {

// Mirrors torch.distributed.tensor.distribute_tensor(full, mesh, placements), without
// communication: every rank already holds `full` (a CPU tensor, any strides) and cuts its
// own piece, Full[I_0 x I_1 x ...] with the owned index lists of `rank` (SPEC 1.5), into a
// new contiguous tensor. A _StridedShard piece that is not a slice is gathered by its index
// lists. Partial placements (which PyTorch's distribute_tensor rejects) get values whose
// reduction in any mesh-dim order gives back `full`: a rank off coordinate 0 of some
// Partial(sum) mesh dim holds zeros; otherwise a rank off coordinate 0 of some
// Partial(product) mesh dim holds ones; every other rank (avg, min, max) holds `full`'s
// values. InvalidArgument for a non-CPU `full`, a rank not in the mesh and the errors of
// ComputeLocalShapeAndGlobalOffset.
absl::StatusOr<DTensor> DistributeTensor(const Tensor& full, std::shared_ptr<const DeviceMesh> mesh,
                                         const std::vector<Placement>& placements, int64_t rank);

// Mirrors DTensor.full_tensor(): the global tensor, contiguous, on every rank. Partial
// mesh dims are all-reduced on their mesh-dim communicator in MeshDimsToReplicate order;
// then, if the tensor is sharded (NumShards > 1), every rank's zero-padding-free local
// buffer is all-gathered (AllGatherV, counts from the sharding arithmetic) and scattered
// into the result by its owned index lists (SPEC 2, "equivalent C++ strategy"), which
// places uneven, empty and _StridedShard pieces bit-exactly. With nothing to replicate
// the local tensor itself is returned (aliasing, as PyTorch does). InvalidArgument when
// the DTensor's mesh is not `mesh_comm`'s, its local tensor is not on the CPU or does not
// have the local shape of this rank (ValidateLocalShape; found before communicating, so a
// rank alone in error leaves the others waiting). Collective over mesh_comm.comm().
absl::StatusOr<Tensor> FullTensor(const DTensor& dtensor, DeviceMeshComm& mesh_comm);

// Mirrors DTensor.from_local(local, mesh, placements, shape=global_shape). The ranks
// exchange their local shapes (one AllGatherBytes; also when `global_shape` is given, so
// every rank checks every other). Without `global_shape` the global shape is derived
// from the exchanged shapes: along a tensor dim sharded by some mesh dims, the sum of the
// local sizes over the ranks at coordinate 0 of every other mesh dim (10 rows over 4
// ranks is 10, never PyTorch's even-sharding guess of 12); along other dims the local
// size. Then every rank's local shape must be ComputeLocalShape's for the global shape:
// InvalidArgument on every rank otherwise, naming `name`, each offending rank, its
// expected and actual local shape (cases/gather.md case-004); also when the ranks pass
// different tensor ranks or different global shapes, or comm.size() != mesh size. The
// global stride is contiguous. `local` is kept as it is (any device).
absl::StatusOr<DTensor> FromLocal(const Tensor& local, std::shared_ptr<const DeviceMesh> mesh,
                                  const std::vector<Placement>& placements, Communicator& comm,
                                  const std::optional<IntVector>& global_shape = std::nullopt,
                                  absl::string_view name = "");

// Mirrors torch.distributed._state_dict_utils._all_gather_sharded_tensor(st, pg), without
// its FSDP1 assumptions (SPEC 3.2): the ranks exchange the metadata of their local shards
// (AllGatherBytes) and their data (one AllGatherV, zero elements allowed), and every rank
// places every shard at its metadata offsets, in any number per rank and any order
// (cases/gather.md case-002, case-003). A global shape with a zero dim gives an empty
// tensor of that shape. Elements no shard covers are zero. Local shards must be on the
// CPU. InvalidArgument on every rank when the ranks disagree on the global shape or dtype
// or a non-empty shard does not fit in the global shape.
absl::StatusOr<Tensor> GatherShardedTensor(const ShardedTensor& st, Communicator& comm);

}  // namespace sdrt

#endif  // SDRT_CORE_DTENSOR_OPS_H_
