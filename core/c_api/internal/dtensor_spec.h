// The C API's sdrt_dtensor_spec_t (core/c_api/c_api.h) read into sdrt's types, checked:
// shared by sdrt_state_dict_add and sdrt_compute_local_shape_and_global_offset.
#ifndef SDRT_CORE_C_API_INTERNAL_DTENSOR_SPEC_H_
#define SDRT_CORE_C_API_INTERNAL_DTENSOR_SPEC_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::c_api {

struct DTensorSpec {
  std::shared_ptr<const DeviceMesh> mesh;
  std::vector<Placement> placements;  // empty when spec.placements is NULL
  IntVector global_shape;
};

// The mesh (over spec.mesh_ranks, or 0..N-1; of `device_type`, "cpu" or "cuda"), the
// placements parsed when spec.placements is set, and the global shape. InvalidArgument
// naming the field for a missing mesh or global shape, mesh sizes outside [1, 2^20] or a
// mesh above kMaxMeshRanks, and the errors of DeviceMesh::Create and ParsePlacements.
absl::StatusOr<DTensorSpec> ReadDTensorSpec(const sdrt_dtensor_spec_t& spec,
                                            const std::string& device_type);

}  // namespace sdrt::c_api

#endif  // SDRT_CORE_C_API_INTERNAL_DTENSOR_SPEC_H_
