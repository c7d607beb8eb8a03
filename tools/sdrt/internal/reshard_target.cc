#include "sdrt/tools/sdrt/internal/reshard_target.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {

absl::StatusOr<ShardedCheckpointIndex> TargetIndex(const std::string& mesh_spec,
                                                   const std::string& dim_names,
                                                   const ShardingPlan& plan,
                                                   const ShardedCheckpointIndex& source) {
  absl::StatusOr<DeviceMesh> shape_only = DeviceMesh::FromString(mesh_spec);
  if (!shape_only.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh \"", mesh_spec, "\": ", shape_only.status().message()));
  }
  std::vector<std::string> names;
  if (!dim_names.empty()) names = absl::StrSplit(dim_names, ',');
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(shape_only->shape(), {}, names);
  if (!mesh.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--mesh ", mesh_spec, " --mesh-dim-names ",
                                                   dim_names, ": ", mesh.status().message()));
  }
  if (mesh->num_ranks() > kMaxShardedCheckpointRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh ", mesh_spec, ": more than ", kMaxShardedCheckpointRanks, " ranks"));
  }
  SDRT_RETURN_IF_ERROR(plan.CheckMesh(*mesh));
  ShardedCheckpointIndex index;
  index.world_size = mesh->num_ranks();
  index.mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  index.plan = plan.name();
  index.metadata = source.metadata;
  for (int64_t r = 0; r < index.world_size; ++r) {
    index.files.push_back(RankFileName(r, index.world_size));
  }
  for (const ShardedCheckpointTensor& s : source.tensors) {
    ShardedCheckpointTensor t = s;
    SDRT_ASSIGN_OR_RETURN(t.placements, plan.PlacementsFor(s.name, s.shape, *index.mesh));
    SDRT_RETURN_IF_ERROR(
        internal::CheckShardingCutsWholeBytes(s.name, s.dtype, s.shape, *index.mesh, t.placements));
    index.tensors.push_back(std::move(t));
  }
  return index;
}

nlohmann::ordered_json TransferStatsJson(const TransferStats& stats) {
  return {{"wire_bytes", stats.wire_bytes},
          {"optimum_bytes", stats.optimum_bytes},
          {"self_bytes", stats.self_bytes},
          {"max_sent_bytes", stats.max_sent_bytes},
          {"max_received_bytes", stats.max_received_bytes},
          {"exchanges", stats.exchanges},
          {"collectives", stats.collectives}};
}

}  // namespace sdrt::cli
