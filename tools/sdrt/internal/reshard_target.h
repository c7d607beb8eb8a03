// The target layout of `sdrt reshard` and of `sdrt load` of a sharded folder: the index a
// folder in the new layout gets (this rank's meta DTensors in it: the plan's
// ShardingPlan::MetaStateDict of the index's TensorSpecs on its mesh).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_
#define SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_

#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"

namespace sdrt::cli {

// The index of `source`'s tensors (names, dtypes, shapes, hashes, metadata) laid out with
// `plan`'s placements on the mesh `mesh_spec` ("4", "2x2") over ranks 0..W-1, with the
// mesh dims named `dim_names` ("dp,tp"; empty: unnamed). InvalidArgument naming --mesh
// for a bad mesh or more than kMaxShardedCheckpointRanks ranks; the plan's errors
// (CheckMesh, PlacementsFor) and a sub-byte tensor cut inside a byte.
absl::StatusOr<ShardedCheckpointIndex> TargetIndex(const std::string& mesh_spec,
                                                   const std::string& dim_names,
                                                   const ShardingPlan& plan,
                                                   const ShardedCheckpointIndex& source);

// The plan's and the run's figures as --json prints them: wire, optimum and self bytes, the
// busiest rank's sent and received bytes, rounds and collectives.
nlohmann::ordered_json TransferStatsJson(const TransferStats& stats);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_RESHARD_TARGET_H_
