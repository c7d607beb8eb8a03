// DTensor: a local tensor plus how it sits in a global one (mesh, placements, global
// shape and stride), mirroring torch.distributed.tensor.DTensor's metadata. Pure data:
// the local-shape arithmetic and the collectives (full_tensor, redistribute) are built
// on top of it (tensor/ arithmetic, core/ collectives).
#ifndef SDRT_TENSOR_DTENSOR_DTENSOR_H_
#define SDRT_TENSOR_DTENSOR_DTENSOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class DTensor {
 public:
  // Checks the metadata is self-consistent: one placement per mesh dim, shard dims below
  // the global rank, local rank == global rank, global stride of the global rank (empty
  // means contiguous). Does not check the local shape against the placements (that needs
  // the rank's mesh coordinate). InvalidArgument naming the field otherwise.
  static absl::StatusOr<DTensor> Make(Tensor local, std::shared_ptr<const DeviceMesh> mesh,
                                      std::vector<Placement> placements, IntVector global_shape,
                                      IntVector global_stride = {});

  DTensor() = default;
  const Tensor& local() const { return local_; }
  const std::shared_ptr<const DeviceMesh>& mesh() const { return mesh_; }
  // One per mesh dim; empty for a default-constructed DTensor.
  const std::vector<Placement>& placements() const {
    return placements_ != nullptr ? *placements_ : NoPlacements();
  }
  const IntVector& global_shape() const { return global_shape_; }
  const IntVector& global_stride() const { return global_stride_; }
  DType dtype() const { return local_.dtype(); }
  Device device() const { return local_.device(); }

  // The same DTensor metadata around another local tensor (same dtype and rank), e.g. a
  // CPU copy of the local shard; the placements are shared, not copied. InvalidArgument
  // when dtype or rank differ.
  absl::StatusOr<DTensor> WithLocal(Tensor local) const;

  // "DTensor(float32[8, 4] global, local float32[2, 4] cpu, [S(0)], mesh 4)".
  std::string ToString() const;

 private:
  static const std::vector<Placement>& NoPlacements();

  Tensor local_;
  std::shared_ptr<const DeviceMesh> mesh_;
  // Immutable, so shared by every copy and WithLocal of this DTensor: copying one (10,000
  // per state dict) allocates nothing for them.
  std::shared_ptr<const std::vector<Placement>> placements_;
  IntVector global_shape_;
  IntVector global_stride_;
};

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTENSOR_DTENSOR_H_
