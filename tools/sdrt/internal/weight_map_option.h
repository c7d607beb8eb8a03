// `--map`, `--head-size` and `--cast` (sdrt load, sdrt inspect, sdrt shard): the engine's layout of a
// checkpoint, as a weight map (core/distributed/weight_map.h) and a destination dtype.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_WEIGHT_MAP_OPTION_H_
#define SDRT_TOOLS_SDRT_INTERNAL_WEIGHT_MAP_OPTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtype.h"

namespace sdrt::cli {

struct WeightMapOptions {
  std::string map;        // --map: "vllm-llama", "megatron-llama" or a MAP.json path; "": none
  int64_t head_size = 0;  // --head-size; 0: from SRC's config.json
  // --cast bf16|f16|f32|fp8-block|fp8-tensor; "": each tensor keeps its dtype
  std::string cast;
};

// Adds --map, --head-size and --cast to `cmd`.
void AddWeightMapOptions(CLI::App* cmd, WeightMapOptions* options);

// The map of --map (nullopt without one): a built-in map with --head-size, or else the
// head size SRC's config.json gives (head_dim, else hidden_size / num_attention_heads, when
// `src` is a folder holding one as a regular file, not a link), or a JSON map file (at
// most 1 MiB, a regular file). megatron-llama's splits take their sizes from that
// config.json too (num_attention_heads, num_key_value_heads, intermediate_size), else from
// SRC's tensors `sources` (the first layer's linear_proj columns are q's rows, the rest of
// linear_qkv's rows k's and v's, linear_fc1's halves gate's and up's), so that the
// destinations of a Megatron checkpoint can be listed (EngineTensors); a split whose sizes
// are found neither way needs its destinations given. InvalidArgument naming the option for
// a built-in map without a head size, a file that cannot be read, WeightMap's errors.
absl::StatusOr<std::optional<WeightMap>> ParseWeightMap(
    const WeightMapOptions& options, const std::string& src,
    const std::vector<SafetensorsTensorSpec>& sources);

// The engine's tensor list: `sources` through `map` (WeightMap::DestinationTensors, a
// kShards fuse cut into as many parts as `plan` shards it on `mesh`), every float tensor in
// --cast's dtype (FP8 codes dequantized with their "_scale_inv" / "_scale" tensors, which
// the list then leaves out), or with fp8-block / fp8-tensor every linear layer's 2-D weight
// (a name ending in "_proj.weight", or Megatron's linear_qkv, linear_proj, linear_fc1,
// linear_fc2) in float8_e4m3fn. The map's and the plan's errors.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> EngineTensors(
    const std::optional<WeightMap>& map, const WeightMapOptions& options,
    const std::vector<SafetensorsTensorSpec>& sources, const ShardingPlan& plan,
    const DeviceMesh& mesh);
// The same under a parallel layout description: a fuse is cut into as many parts as
// `layout` cuts the fused tensor when it places it alone (its tp placement over tp, or over
// etp for an expert's), whatever its stage. ParallelLayout::Place's errors besides.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> EngineTensors(
    const std::optional<WeightMap>& map, const WeightMapOptions& options,
    const std::vector<SafetensorsTensorSpec>& sources, const ParallelLayout& layout);

// With --cast fp8-block or fp8-tensor, the scales beside each float8_e4m3fn DTensor of
// `local` (rank `rank`'s, made by MetaStateDict from EngineTensors' list): a meta float32
// DTensor "<weight>_scale_inv" of its [ceil(rows / 128), ceil(cols / 128)] block scales laid
// out as the weight (each rank's blocks of its piece), or "<weight>_scale" of one scale
// replicated. The layout's errors.
absl::Status AddScaleLeaves(const WeightMapOptions& options, int64_t rank, Map& local);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_WEIGHT_MAP_OPTION_H_
