#include "sdrt/tools/sdrt/internal/reshard_target.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {

absl::StatusOr<ShardedCheckpointIndex> TargetIndex(const std::string& mesh_spec,
                                                   const MeshAndPlan& layout,
                                                   const ShardedCheckpointIndex& source) {
  if (layout.mesh->num_ranks() > kMaxShardedCheckpointRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh ", mesh_spec, ": more than ", kMaxShardedCheckpointRanks, " ranks"));
  }
  ShardedCheckpointIndex index;
  index.world_size = layout.mesh->num_ranks();
  index.mesh = layout.mesh;
  index.plan = layout.plan.name();
  index.metadata = source.metadata;
  for (int64_t r = 0; r < index.world_size; ++r) {
    index.files.push_back(RankFileName(r, index.world_size));
  }
  for (const ShardedCheckpointTensor& s : source.tensors) {
    ShardedCheckpointTensor t = s;
    SDRT_ASSIGN_OR_RETURN(t.placements, layout.plan.PlacementsFor(s.name, s.shape, *index.mesh));
    SDRT_RETURN_IF_ERROR(
        internal::CheckShardingCutsWholeBytes(s.name, s.dtype, s.shape, *index.mesh, t.placements));
    index.tensors.push_back(std::move(t));
  }
  return index;
}

}  // namespace sdrt::cli
