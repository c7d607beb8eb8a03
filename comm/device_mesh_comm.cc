#include "sdrt/comm/device_mesh_comm.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

DeviceMeshComm::DeviceMeshComm(std::shared_ptr<const DeviceMesh> mesh, Communicator& comm,
                               IntVector coord)
    : mesh_(std::move(mesh)),
      comm_(&comm),
      coordinate_(std::move(coord)),
      dim_comms_(static_cast<size_t>(mesh_->ndim())) {}

absl::StatusOr<DeviceMeshComm> DeviceMeshComm::Create(std::shared_ptr<const DeviceMesh> mesh,
                                                      Communicator& comm) {
  if (mesh == nullptr) return absl::InvalidArgumentError("DeviceMeshComm: null mesh");
  if (mesh->num_ranks() != comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceMeshComm: ", mesh->ToString(), " has ", mesh->num_ranks(),
                     " ranks but the communicator has ", comm.size()));
  }
  for (int64_t r : mesh->ranks()) {
    if (r < 0 || r >= comm.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DeviceMeshComm: ", mesh->ToString(), " holds rank ", r,
                       " outside the communicator of size ", comm.size()));
    }
  }
  // Every rank is in the mesh: it has as many distinct ranks as the communicator.
  IntVector coord = *mesh->Coordinate(comm.rank());
  return DeviceMeshComm(std::move(mesh), comm, std::move(coord));
}

absl::StatusOr<Communicator*> DeviceMeshComm::DimComm(int mesh_dim) {
  if (mesh_dim < 0 || mesh_dim >= mesh_->ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceMeshComm::DimComm: mesh dim ", mesh_dim,
                                                   " out of range for ", mesh_->ToString()));
  }
  std::unique_ptr<Communicator>& slot = dim_comms_[static_cast<size_t>(mesh_dim)];
  if (slot == nullptr) {
    // Color: the row-major index of the coordinate with dim `mesh_dim` zeroed, shared by
    // exactly the ranks agreeing on every other coordinate; key: the coordinate itself.
    int64_t color = 0;
    for (int d = 0; d < mesh_->ndim(); ++d) {
      color = color * mesh_->size(d) + (d == mesh_dim ? 0 : coordinate_[d]);
    }
    SDRT_ASSIGN_OR_RETURN(
        slot, comm_->Split(static_cast<int>(color), static_cast<int>(coordinate_[mesh_dim])));
  }
  return slot.get();
}

}  // namespace sdrt
