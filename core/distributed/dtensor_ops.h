// Collectives over DTensor and ShardedTensor: make a DTensor out of a full tensor or out
// of this rank's local piece, and gather either kind back into the full tensor on every
// rank (docs/SEMANTICS.md 1.5, 1.6, 2 and 3). Only the Communicator interface is used, so
// these work with any backend, a SelfCommunicator included.
//
// FullTensor and GatherShardedTensor are one-tensor gathers through the transfer that
// GatherStateDict (core/distributed/distributed_state_dict.h) runs over whole state dicts
// (core/distributed/internal/gather_transfer.h): a reshard into Replicate on every rank,
// planned and moved by the one transfer engine (core/distributed/internal/engine/), with
// the same Partial reduction; so both give the same bits.
//
// Devices: tensors live on a device the communicator serves, and results come back on
// the device of the tensors passed in: CPU tensors over an MpiCommunicator; CUDA tensors
// over an NcclCommunicator on their device, and CPU tensors over an NcclCommunicator
// (staged through its GPU, case-013). Elements move between local pieces and full tensors
// by region copies (tensor/sharding/region_copy.h, Tensor::CopyFrom on views: CUDA copies
// run on CUDA's default stream and complete before the call returns), so no host code
// reads device memory. The caller's work on other streams must be complete before a CUDA
// tensor is handed in (the Communicator contract).
//
// Every function that takes a communicator is collective over it: every rank calls it with
// matching arguments. Metadata errors found after an exchange (FromLocal,
// GatherShardedTensor) are seen by every rank alike, so every rank returns the same error.
// Ranks are the communicator's; a mesh's ranks are ranks of that communicator.
#ifndef SDRT_CORE_DISTRIBUTED_DTENSOR_OPS_H_
#define SDRT_CORE_DISTRIBUTED_DTENSOR_OPS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// Mirrors DTensor.full_tensor(): the global tensor, contiguous, on every rank, on the
// local tensor's device. Partial mesh dims are all-reduced on a copy of the local (made on
// the local's device, where this call's bucket lives) on their mesh-dim communicator in
// MeshDimsToReplicate order; then, if the tensor is sharded (NumShards > 1), the ranks'
// zero-padding-free local pieces are all-gathered into one buffer on the local's device
// (one AllGatherV, counts from the sharding arithmetic) and copied into the result by
// their owned index runs (docs/SEMANTICS.md 2, "equivalent C++ strategy"), which places
// uneven, empty and _StridedShard pieces bit-exactly. Only the ranks at coordinate 0 of
// every Replicate and Partial mesh dim contribute elements; the others hold copies of
// those pieces and send 0 elements, so the gather moves each piece once. With nothing to
// replicate the local tensor itself is returned (aliasing, as PyTorch does); with only
// Partial dims to reduce, the reduced copy. InvalidArgument when the DTensor's mesh is
// not `mesh_comm`'s, its local tensor is on a device the communicator does not serve
// (neither the CPU nor comm.device()) or does not have the local shape of this rank
// (ValidateLocalShape); these are found before communicating, so a rank alone in error
// leaves the others waiting. Collective over mesh_comm.comm() and, for Partial mesh
// dims, over their DimComm.
absl::StatusOr<Tensor> FullTensor(const DTensor& dtensor, DeviceMeshComm& mesh_comm);

// Mirrors DTensor.from_local(local, mesh, placements, shape=global_shape). The ranks
// exchange their local shapes (one AllGatherBytes; also when `global_shape` is given, so
// every rank checks every other). Without `global_shape` the global shape is derived
// from the exchanged shapes: along a tensor dim sharded by some mesh dims, the sum of the
// local sizes over the ranks at coordinate 0 of every other mesh dim (10 rows over 4
// ranks is 10, never PyTorch's even-sharding guess of 12); along other dims the local
// size. Then every rank's local shape must be ComputeLocalShape's for the global shape:
// InvalidArgument on every rank otherwise, naming `name`, each offending rank, its
// expected and actual local shape (case-004); also when the ranks pass
// different tensor ranks or different global shapes, or comm.size() != mesh size. The
// global stride is contiguous. `local` is kept as it is (any device).
absl::StatusOr<DTensor> FromLocal(const Tensor& local, std::shared_ptr<const DeviceMesh> mesh,
                                  const std::vector<Placement>& placements, Communicator& comm,
                                  const std::optional<IntVector>& global_shape = std::nullopt,
                                  absl::string_view name = "");

// Mirrors torch.distributed._state_dict_utils._all_gather_sharded_tensor(st, pg), without
// its FSDP1 assumptions (docs/SEMANTICS.md 3.2): the ranks exchange the boxes of their
// local shards together with their dtype, global shape and shard device (one
// AllGatherBytes) and then their data (one AllGatherV, zero elements allowed), and every
// rank places every shard at its metadata offsets, in any number per rank and any order
// (case-002, case-003). A global shape with a zero dim gives an empty tensor of that
// shape; a 0-dim one, its one element. Elements no shard covers are zero. A rank's local
// shards are all on the CPU or all on comm.device(); the gather buffers and the result
// are on that device. A rank without local shards takes the device (CPU or comm.device())
// of the lowest rank that has some, and comm.device() when no rank has any (PyTorch's
// _all_gather_sharded_tensor puts every result on the group's device; sdrt keeps CPU
// shards on the CPU). InvalidArgument on every rank when the ranks disagree on the
// global shape or dtype, a non-empty shard does not fit in the global shape (or has a
// negative offset or size), or some rank's local shards are on a device the communicator
// does not serve or on two devices.
absl::StatusOr<Tensor> GatherShardedTensor(const ShardedTensor& st, Communicator& comm);

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_DTENSOR_OPS_H_
