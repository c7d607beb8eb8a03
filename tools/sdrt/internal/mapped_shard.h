// `sdrt shard --map / --cast` (issue 30): an engine's own layout of a full checkpoint saved
// as an sdrt sharded folder, whose rank files hold the engine's names, dtypes and pieces
// (vLLM's fused qkv_proj and gate_up_proj, a padded vocabulary, FP8 codes with their block
// scales), in one process with no communicator. Each rank's pieces are made by LoadStateDict
// with the map as that rank (LoadOptions::rank), one rank at a time, so memory peaks at one
// rank's share as WriteShardedCheckpoint's does. The index records each tensor's full XXH64
// (what a gather checks): a tensor the map and cast leave as SRC has it hashed from SRC;
// any other is assembled from every rank's piece, one tensor at a time. Not public API.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_MAPPED_SHARD_H_
#define SDRT_TOOLS_SDRT_INTERNAL_MAPPED_SHARD_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {

// Writes `out_dir` (atomically, as WriteShardedCheckpoint does; `overwrite` as its option)
// holding `source` (named `source_name` in messages) in the engine's layout: EngineTensors'
// list of `map` and `engine.cast`, laid out by `layout`, FP8 scales beside FP8 weights
// (AddScaleLeaves). With --cast fp8-tensor each FP8 weight's one scale is its whole tensor's
// (the amax over every rank's pieces, which ranks loaded one at a time cannot agree on): the
// pieces are loaded in their source's dtype and quantized here with the scale found while
// hashing the whole tensor. Returns the index written. InvalidArgument: --cast fp8-tensor of
// a split's parts (their scales are blocks of their source), a map or plan that does not fit
// (naming the rule and tensor), a mapped tensor whose pieces are not one box each
// (Unimplemented); the errors of LoadStateDict and of the folder's writes.
absl::StatusOr<ShardedCheckpointIndex> WriteMappedShards(const CheckpointSource& source,
                                                         const std::string& source_name,
                                                         const std::optional<WeightMap>& map,
                                                         const WeightMapOptions& engine,
                                                         const MeshAndPlan& layout,
                                                         const std::string& out_dir,
                                                         bool overwrite);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_MAPPED_SHARD_H_
