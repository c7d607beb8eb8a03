#include "sdrt/core/c_api/internal/dtensor_spec.h"

#include <utility>

#include "sdrt/tensor/status_macros.h"

namespace sdrt::c_api {

absl::StatusOr<DTensorSpec> ReadDTensorSpec(const sdrt_dtensor_spec_t& spec,
                                            const std::string& device_type) {
  if (spec.mesh_ndim < 1 || spec.mesh_shape == nullptr) {
    return absl::InvalidArgumentError("spec.mesh_ndim must be >= 1 with a mesh_shape");
  }
  if (spec.global_ndim < 0 || (spec.global_ndim > 0 && spec.global_shape == nullptr)) {
    return absl::InvalidArgumentError("spec.global_shape is NULL");
  }
  IntVector mesh_shape(spec.mesh_shape, spec.mesh_shape + spec.mesh_ndim);
  std::vector<int64_t> ranks;
  if (spec.mesh_ranks != nullptr) {
    int64_t n = 1;
    for (int64_t d : mesh_shape) {
      if (d < 1 || d > kMaxMeshRanks) {
        return absl::InvalidArgumentError("spec.mesh_shape: sizes must be in [1, 2^20]");
      }
      n *= d;
      if (n > kMaxMeshRanks) return absl::InvalidArgumentError("spec.mesh_shape too large");
    }
    ranks.assign(spec.mesh_ranks, spec.mesh_ranks + n);
  }
  DTensorSpec out;
  SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh,
                        DeviceMesh::Create(mesh_shape, std::move(ranks), {}, device_type));
  out.mesh = std::make_shared<const DeviceMesh>(std::move(mesh));
  if (spec.placements != nullptr) {
    SDRT_ASSIGN_OR_RETURN(out.placements, ParsePlacements(spec.placements));
  }
  out.global_shape.assign(spec.global_shape, spec.global_shape + spec.global_ndim);
  return out;
}

}  // namespace sdrt::c_api
