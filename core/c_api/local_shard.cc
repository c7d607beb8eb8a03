// sdrt/c_api.h: where a rank's piece of a DTensor sits (ComputeLocalShapeAndGlobalOffset
// under a spec's placements or a sharding plan's).
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/dtensor_spec.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

// What the last sdrt_compute_local_shape_and_global_offset on this thread handed out.
struct LocalShardStorage {
  sdrt::IntVector local_shape;
  sdrt::IntVector global_offset;
  std::string placements;
};

LocalShardStorage& Storage() { return c_api::ThreadStorage<LocalShardStorage>(); }

}  // namespace

extern "C" {

sdrt_status_t sdrt_compute_local_shape_and_global_offset(const sdrt_dtensor_spec_t* spec,
                                                         const char* plan, const char* name,
                                                         int64_t rank, sdrt_local_shard_t* out) {
  return Guard("sdrt_compute_local_shape_and_global_offset", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(spec, "spec"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(spec, "spec"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(out, "out"));
    const bool by_plan = spec->placements == nullptr;
    if (by_plan != (plan != nullptr) || by_plan != (name != nullptr)) {
      return absl::InvalidArgumentError(
          "give spec->placements, or (with spec->placements NULL) both plan and name");
    }
    SDRT_ASSIGN_OR_RETURN(c_api::DTensorSpec read, c_api::ReadDTensorSpec(*spec, "cpu"));
    if (by_plan) {
      SDRT_ASSIGN_OR_RETURN(const sdrt::ShardingPlan sharding, sdrt::ShardingPlan::FromSpec(plan));
      SDRT_ASSIGN_OR_RETURN(read.placements,
                            sharding.PlacementsFor(name, read.global_shape, *read.mesh));
    }
    SDRT_ASSIGN_OR_RETURN(sdrt::LocalShardInfo info,
                          sdrt::ComputeLocalShapeAndGlobalOffset(read.global_shape, *read.mesh,
                                                                 read.placements, rank));
    LocalShardStorage& storage = Storage();
    storage.local_shape = std::move(info.local_shape);
    storage.global_offset = std::move(info.global_offset);
    storage.placements = sdrt::PlacementsToString(read.placements);
    out->ndim = static_cast<int32_t>(storage.local_shape.size());
    out->local_shape = storage.local_shape.empty() ? nullptr : storage.local_shape.data();
    out->global_offset = storage.global_offset.empty() ? nullptr : storage.global_offset.data();
    out->is_box = info.is_slice ? 1 : 0;
    out->placements = storage.placements.c_str();
    return absl::OkStatus();
  });
}

}  // extern "C"
