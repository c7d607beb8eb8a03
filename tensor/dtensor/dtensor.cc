#include "sdrt/tensor/dtensor/dtensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

absl::StatusOr<DTensor> DTensor::Make(Tensor local, std::shared_ptr<const DeviceMesh> mesh,
                                      std::vector<Placement> placements, IntVector global_shape,
                                      IntVector global_stride) {
  if (!local.defined()) return absl::InvalidArgumentError("DTensor: undefined local tensor");
  if (mesh == nullptr) return absl::InvalidArgumentError("DTensor: null mesh");
  if (static_cast<int>(placements.size()) != mesh->ndim()) {
    return absl::InvalidArgumentError(absl::StrCat("DTensor: ", placements.size(), " placements ",
                                                   PlacementsToString(placements), " for a ",
                                                   mesh->ndim(), "-d mesh"));
  }
  const int ndim = static_cast<int>(global_shape.size());
  for (const Placement& p : placements) {
    if (p.is_shard_like() && p.dim() >= ndim) {
      return absl::InvalidArgumentError(
          absl::StrCat("DTensor: placement ", p.ToString(), " shards dim ", p.dim(), " of a ", ndim,
                       "-d global shape ", ShapeToString(global_shape)));
    }
  }
  if (local.dim() != ndim) {
    return absl::InvalidArgumentError(absl::StrCat("DTensor: local ", local.ToString(),
                                                   " has a different rank than global shape ",
                                                   ShapeToString(global_shape)));
  }
  SDRT_RETURN_IF_ERROR(CheckedNumel(global_shape).status());
  if (global_stride.empty()) global_stride = ContiguousStrides(global_shape);
  if (static_cast<int>(global_stride.size()) != ndim) {
    return absl::InvalidArgumentError(absl::StrCat("DTensor: global stride ",
                                                   ShapeToString(global_stride), " for shape ",
                                                   ShapeToString(global_shape)));
  }
  DTensor out;
  out.local_ = std::move(local);
  out.mesh_ = std::move(mesh);
  out.placements_ = std::make_shared<const std::vector<Placement>>(std::move(placements));
  out.global_shape_ = std::move(global_shape);
  out.global_stride_ = std::move(global_stride);
  return out;
}

absl::StatusOr<DTensor> DTensor::WithLocal(Tensor local) const {
  if (local.dtype() != local_.dtype() || local.dim() != local_.dim()) {
    return absl::InvalidArgumentError(absl::StrCat("DTensor::WithLocal: ", local.ToString(),
                                                   " does not match local ", local_.ToString()));
  }
  DTensor out;  // the metadata copied, not this local
  out.local_ = std::move(local);
  out.mesh_ = mesh_;
  out.placements_ = placements_;
  out.global_shape_ = global_shape_;
  out.global_stride_ = global_stride_;
  return out;
}

const std::vector<Placement>& DTensor::NoPlacements() {
  static const std::vector<Placement>* const none = new std::vector<Placement>();
  return *none;
}

std::string DTensor::ToString() const {
  return absl::StrCat("DTensor(", DTypeName(dtype()), ShapeToString(global_shape_),
                      " global, local ", local_.ToString(), ", ", PlacementsToString(placements()),
                      ", mesh ", mesh_ ? absl::StrJoin(mesh_->shape(), "x") : "none", ")");
}

}  // namespace sdrt
