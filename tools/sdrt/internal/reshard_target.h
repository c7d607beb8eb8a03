// The target layout of `sdrt reshard` (tools/sdrt/reshard.cc): the index a folder in the new
// layout gets (each rank's meta DTensors in it: the plan's ShardingPlan::MetaStateDict of
// the index's TensorSpecs on its mesh).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_
#define SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_

#include <string>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tools/sdrt/internal/options.h"

namespace sdrt::cli {

// The index of `source`'s tensors (names, dtypes, shapes, hashes, metadata) laid out with
// `layout`'s plan on its mesh over ranks 0..W-1 (`mesh_spec` is --mesh, for messages).
// InvalidArgument naming --mesh for more than kMaxShardedCheckpointRanks ranks; the plan's
// errors (PlacementsFor) and a sub-byte tensor cut inside a byte.
absl::StatusOr<ShardedCheckpointIndex> TargetIndex(const std::string& mesh_spec,
                                                   const MeshAndPlan& layout,
                                                   const ShardedCheckpointIndex& source);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_
