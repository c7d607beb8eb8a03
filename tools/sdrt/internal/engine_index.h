// The index of a sharded folder in an engine's layout (`sdrt shard` and `sdrt reshard` with
// or without --map / --cast): the engine's tensors (a source's through a weight map and a
// cast: weight_map_option.h's EngineTensors), laid out by a plan on a mesh, FP8 scales
// beside FP8 weights, and which tensors keep the source's bytes (their full hash is the
// source's) and which are made anew (hashed from the tensors made together: a split's
// destinations, FP8 codes with their scales). Not public API.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_ENGINE_INDEX_H_
#define SDRT_TOOLS_SDRT_INTERNAL_ENGINE_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {

struct EngineIndex {
  // Every field but the tensors' xxh64, which the caller fills (the folder's rank files
  // record the index's hash, so they come first).
  ShardedCheckpointIndex index;
  std::vector<SafetensorsTensorSpec> tensors;  // EngineTensors' list, before scales are added
  std::map<std::string, size_t> by_name;         // tensors' positions by name
  // Tensors hashed together (positions in index.tensors), and whether they are the source's
  // tensors of those names as they are (no rule takes them, same dtype and shape).
  struct Group {
    std::vector<size_t> members;
    bool as_in_source = false;
  };
  std::vector<Group> groups;
};

// kEngineLayoutMetadataKey's value (sharded_checkpoint.h) for `layout`: "--mesh M --plan P",
// a PLAN.json by its absolute path and its rules' hash ("--mesh 2 --plan /d/p.json (rules
// xxh64 0123456789abcdef)": ShardingPlan::rules_xxh64).
std::string EngineLayoutText(const MeshAndPlan& layout);
// kEngineLayoutMetadataKey's value in `metadata`, or empty.
std::string RecordedEngineLayout(const std::map<std::string, std::string>& metadata);

// InvalidArgument when `recorded` (kEngineLayoutMetadataKey's value in the source `source_name`;
// empty: none) is not `wanted` (EngineLayoutText of the layout asked for); PLAN.json plans
// are compared by their rules' hash, not their path (a record without the hash, by path).
absl::Status CheckEngineLayout(const std::string& source_name, const std::string& recorded,
                               const std::string& wanted);

// The engine's index of a source of tensors `sources` (and `metadata`, recorded as it is,
// with kEngineLayoutMetadataKey set when a fuse or regroup of the map holds its components
// per part, kShards) through `map` and `engine.cast`, on `layout` (`mesh_spec` is --mesh,
// for messages).
// InvalidArgument: more than kMaxShardedCheckpointRanks ranks, EngineTensors' errors (the
// map's naming rule and tensor, the plan's), a sub-byte tensor cut inside a byte.
absl::StatusOr<EngineIndex> MakeEngineIndex(const std::string& mesh_spec,
                                            const std::vector<SafetensorsTensorSpec>& sources,
                                            const std::map<std::string, std::string>& metadata,
                                            const std::optional<WeightMap>& map,
                                            const WeightMapOptions& engine,
                                            const MeshAndPlan& layout);

// What rank `rank` holds of the engine's tensors: meta DTensors in index order (plan's
// MetaStateDict, then AddScaleLeaves); with `only`, of those tensors alone (and the weights
// whose scales they are), at a cost of their count. The plan's errors.
absl::StatusOr<Map> EngineLayout(const EngineIndex& e, const WeightMapOptions& engine,
                                 const MeshAndPlan& layout, int64_t rank,
                                 const std::vector<std::string>* only = nullptr);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_ENGINE_INDEX_H_
