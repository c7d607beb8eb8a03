// DeviceMeshComm: a DeviceMesh bound to a Communicator, with one sub-communicator per mesh
// dim, as torch.distributed.device_mesh.DeviceMesh.get_group(mesh_dim) provides them
// (docs/SEMANTICS.md 1.1): the group of mesh dim d seen from a rank holds the ranks whose
// coordinates agree with it on every other dim, ordered by coordinate d, so group rank == coord[d].
//
// The communicator's size must equal the mesh size and the mesh's ranks are ranks of the
// communicator. Sub-communicators are made lazily by Communicator::Split, which is
// collective: every rank must ask for the mesh dims in the same order (the collectives of
// core/distributed/dtensor_ops.h do, as all ranks walk the same placements).
#ifndef SDRT_COMM_DEVICE_MESH_COMM_H_
#define SDRT_COMM_DEVICE_MESH_COMM_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class DeviceMeshComm {
 public:
  // Binds `mesh` to `comm` (not owned; must outlive the result). InvalidArgument when
  // comm.size() != mesh.num_ranks() or the mesh holds a rank outside [0, comm.size()).
  static absl::StatusOr<DeviceMeshComm> Create(std::shared_ptr<const DeviceMesh> mesh,
                                               Communicator& comm);

  const std::shared_ptr<const DeviceMesh>& mesh() const { return mesh_; }
  Communicator& comm() const { return *comm_; }
  // This rank's mesh coordinate.
  const IntVector& coordinate() const { return coordinate_; }

  // The communicator of mesh dim `mesh_dim` (DeviceMesh.get_group), created by a
  // collective Split on first use and cached. InvalidArgument for a mesh dim out of range.
  absl::StatusOr<Communicator*> DimComm(int mesh_dim);

 private:
  DeviceMeshComm(std::shared_ptr<const DeviceMesh> mesh, Communicator& comm, IntVector coord);

  std::shared_ptr<const DeviceMesh> mesh_;
  Communicator* comm_;
  IntVector coordinate_;
  std::vector<std::unique_ptr<Communicator>> dim_comms_;  // one slot per mesh dim
};

}  // namespace sdrt

#endif  // SDRT_COMM_DEVICE_MESH_COMM_H_
