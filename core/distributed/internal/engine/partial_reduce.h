// The all-reduce stage of the transfer engine: Partial sources that every rank of their
// Partial mesh dims needs reduced (a gather, FullTensor) are all-reduced first, on each
// Partial mesh dim's communicator, so that NCCL and MPI reduce with their own tuned
// all-reduces; the move that follows sees those mesh dims as Replicate. A reshard into a
// layout that is not whole on every contributing rank reduces at the receivers instead
// (plan.h, Partial sources). Not public API.
//
// DTensors reduce together when they share the mesh (the same DeviceMeshComm), the dtype
// and their reduction: the sequence of (mesh dim, reduce op) of their Partial mesh dims in
// MeshDimsToReplicate order. Each such group gets one allocation holding copies of its
// members' locals back to back, in input order, with no gap; a bucket is a run of
// consecutive members whose bytes reach at most `bucket_bytes` (one member alone may exceed
// it), all-reduced in place as one range on each Partial mesh dim's communicator in turn.
// The reduced locals are views of that allocation, so nothing is unpacked.
//
// Why every rank of an all-reduce cuts the same buckets: the ranks of mesh dim d's
// communicator differ only in their coordinate on d, which is Partial for every member of
// the group, and a local shape depends only on the coordinates of Shard mesh dims; so the
// members' sizes, and the buckets cut from them, are the same on all those ranks. Groups
// are taken in the order of their first member and members in input order, which the
// agreement made the same on every rank.
//
// Elementwise reductions are unchanged by the concatenation: an element's result is that
// of the same ranks' values with the same op. (MPI may pick another reduction algorithm for
// a larger message; integer and exactly representable floating values reduce to the same
// bits either way, and the tests use those.)
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PARTIAL_REDUCE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PARTIAL_REDUCE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// One DTensor whose Partial mesh dims are reduced: the DTensor (validated: its local shape
// is the one its mesh, placements and this rank's coordinate give) and the DeviceMeshComm of
// its mesh. Neither is owned; both outlive the reduction.
struct PartialSource {
  const DTensor* dtensor = nullptr;
  DeviceMeshComm* mesh_comm = nullptr;
};

class PartialReduction {
 public:
  // Groups the sources, allocates each group's memory on `device` and makes the reduced
  // views (no communication and no copy yet). Errors: MeshDimsToReplicate's;
  // ResourceExhausted when an allocation fails. bucket_bytes >= 1.
  absl::Status Prepare(absl::Span<const PartialSource> sources, Device device,
                       int64_t bucket_bytes);

  // Source i's local with its Partial mesh dims reduced once Run has returned (a
  // contiguous view on the device of Prepare, sharing its group's storage), or an
  // undefined tensor when it has no Partial mesh dim to reduce (its local is the value).
  const Tensor& reduced(size_t i) const { return reduced_[i]; }
  bool empty() const { return groups_.empty(); }

  // Copies each local into its view and all-reduces the buckets. Collective over the
  // Partial mesh dims' communicators (DeviceMeshComm::DimComm, made on first use, in the
  // order the groups and their reductions are met); counts one collective per all-reduce in
  // *collectives. The sources are never written. Errors: DimComm's and the communicator's.
  absl::Status Run(int64_t* collectives) const;

 private:
  struct Reduction {
    int mesh_dim;
    ReduceOp op;
    bool operator==(const Reduction& o) const { return mesh_dim == o.mesh_dim && op == o.op; }
  };
  struct Group {
    DeviceMeshComm* mesh_comm = nullptr;
    DType dtype = DType::kFloat32;
    std::vector<Reduction> reductions;
    std::vector<size_t> members;  // source indices, in source order
    std::vector<int64_t> starts;  // byte offsets of the members, then the end
    Tensor bytes;                 // the group's memory
  };
  std::vector<PartialSource> sources_;
  std::vector<Group> groups_;
  std::vector<Tensor> reduced_;
  int64_t bucket_bytes_ = 1;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PARTIAL_REDUCE_H_
