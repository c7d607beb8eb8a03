#include "sdrt/core/checkpoint/internal/meta_dtensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

absl::StatusOr<DTensor> MetaDTensor(const SafetensorsTensorSpec& t,
                                    std::shared_ptr<const DeviceMesh> mesh,
                                    std::vector<Placement> placements, int64_t rank,
                                    absl::string_view owner) {
  absl::StatusOr<IntVector> shape = ComputeLocalShape(t.shape, *mesh, placements, rank);
  if (!shape.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(owner, ": tensor ", t.name, ": ", shape.status().message()));
  }
  if (IsSubByte(t.dtype)) {  // its pieces whole bytes, the tensor named if not
    SDRT_RETURN_IF_ERROR(CheckShardingCutsWholeBytes(t.name, t.dtype, t.shape, *mesh, placements));
  }
  SDRT_ASSIGN_OR_RETURN(Tensor meta, Tensor::Meta(*shape, t.dtype));
  return DTensor::Make(std::move(meta), std::move(mesh), std::move(placements), t.shape);
}

}  // namespace sdrt::internal
