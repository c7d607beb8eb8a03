// The one maker of a laid-out tensor's meta DTensor for a rank, shared by the two
// MetaStateDicts (ShardingPlan's, core/checkpoint/sharding_plan.h, and ParallelLayout's,
// core/checkpoint/parallel_layout.h). Not public API.
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_META_DTENSOR_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_META_DTENSOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"

namespace sdrt::internal {

// The DTensor rank `rank` (on `mesh`) holds of tensor `t` laid out with `placements`: its
// global shape and dtype, a meta local of the local shape (ComputeLocalShape). Errors:
// ComputeLocalShape's as InvalidArgument "<owner>: tensor <name>: ..." (`owner` names the
// plan or layout); CheckShardingCutsWholeBytes's (naming the tensor) for a sub-byte tensor
// whose pieces cut a byte; DTensor::Make's.
absl::StatusOr<DTensor> MetaDTensor(const SafetensorsTensorSpec& t,
                                    std::shared_ptr<const DeviceMesh> mesh,
                                    std::vector<Placement> placements, int64_t rank,
                                    absl::string_view owner);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_META_DTENSOR_H_
