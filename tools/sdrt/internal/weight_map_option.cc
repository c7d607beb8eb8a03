#include "sdrt/tools/sdrt/internal/weight_map_option.h"

#include <sys/stat.h>

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/options.h"

namespace sdrt::cli {
namespace {

constexpr int64_t kMaxJsonBytes = int64_t{1} << 20;
constexpr int64_t kFp8Block = 128;  // DeepSeek-V3's and vLLM's block edge

// What a Hugging Face folder's config.json says of the model (0 for what it does not say).
struct ModelConfig {
  bool found = false;  // the folder holds a config.json
  int64_t head_size = 0, heads = 0, kv_heads = 0, intermediate = 0;
  // The first size given but not a whole number in [1, 2^40] (then 0 above), naming the
  // file: an error when the head size is wanted from it.
  std::string bad;
};

// `folder`'s config.json (when `folder` is a folder holding one as a regular file, not a
// link); InvalidArgument naming the file when it cannot be read or is not a JSON object.
absl::StatusOr<ModelConfig> ModelConfigOf(const std::string& folder) {
  ModelConfig out;
  struct stat st;
  if (stat(folder.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return out;
  const std::string path = folder + "/config.json";
  // Only a regular file of the folder's own (a link is never followed into an input).
  if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return out;
  absl::StatusOr<std::string> text = internal::ReadBoundedFile(path, kMaxJsonBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", text.status().message()));
  }
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a JSON object"));
  }
  out.found = true;
  const auto number = [&](const char* key) -> int64_t {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return 0;
    const int64_t n = it->is_number_integer() ? it->get<int64_t>() : 0;
    if (n > 0 && n <= (int64_t{1} << 40)) return n;
    if (out.bad.empty()) {
      out.bad = absl::StrCat(path, ": \"", key, "\" is ", it->dump().substr(0, 64),
                             "; a whole number in [1, 2^40] (or null) was expected");
    }
    return 0;
  };
  const int64_t hidden = number("hidden_size");
  out.heads = number("num_attention_heads");
  out.kv_heads = number("num_key_value_heads") > 0 ? number("num_key_value_heads") : out.heads;
  out.intermediate = number("intermediate_size");
  out.head_size = number("head_dim");
  if (out.head_size == 0 && hidden > 0 && out.heads > 0 && hidden % out.heads == 0) {
    out.head_size = hidden / out.heads;
  }
  return out;
}

// The rows of megatron-llama's split parts (q; k and v each; gate and up each), 0 where
// unknown.
struct SplitRows {
  int64_t q = 0, kv = 0, intermediate = 0;
};

// The parts' rows from `config` (heads times `head_size`, the intermediate size), else from
// the first layer's tensors in `sources`: linear_proj's columns are q's rows, linear_qkv's
// other rows are k's and v's halves, linear_fc1's halves gate's and up's (the lowering
// checks the rest).
SplitRows SplitRowsOf(const ModelConfig& config, int64_t head_size,
                      const std::vector<SafetensorsTensorSpec>& sources) {
  SplitRows out;
  if (config.heads > 0 && config.kv_heads > 0 && config.intermediate > 0) {
    out.q = config.heads * head_size;
    out.kv = config.kv_heads * head_size;
    out.intermediate = config.intermediate;
    return out;
  }
  int64_t proj_cols = 0, qkv_rows = 0, fc1_rows = 0;
  const auto first = [](const SafetensorsTensorSpec& t, const char* suffix, int64_t& into,
                        size_t dim) {
    if (into == 0 && t.shape.size() == 2 && absl::EndsWith(t.name, suffix)) {
      into = t.shape[dim];
    }
  };
  for (const SafetensorsTensorSpec& t : sources) {
    first(t, "self_attention.linear_proj.weight", proj_cols, 1);
    first(t, "self_attention.linear_qkv.weight", qkv_rows, 0);
    first(t, "mlp.linear_fc1.weight", fc1_rows, 0);
  }
  if (proj_cols > 0 && qkv_rows > proj_cols && (qkv_rows - proj_cols) % 2 == 0) {
    out.q = proj_cols;
    out.kv = (qkv_rows - proj_cols) / 2;
  }
  if (fc1_rows > 0 && fc1_rows % 2 == 0) out.intermediate = fc1_rows / 2;
  return out;
}

// megatron-llama's splits given their sizes (SplitRowsOf), so that its destinations can be
// listed; a split whose sizes are unknown as it is.
absl::StatusOr<WeightMap> WithSplitSizes(const WeightMap& map, const SplitRows& rows) {
  std::vector<WeightMapRule> rules = map.rules();
  for (WeightMapRule& r : rules) {
    if (r.kind != WeightMapRule::Kind::kSplit) continue;
    if (r.to.size() == 3 && rows.q > 0) {
      r.sizes = {rows.q, rows.kv, rows.kv};
    } else if (r.to.size() == 2 && rows.intermediate > 0) {
      r.sizes = {rows.intermediate, rows.intermediate};
    }
  }
  return WeightMap::FromRules(std::move(rules));
}

// A linear layer's weight of a Llama-family model, HF's or Megatron's names: what an FP8
// cast quantizes (never embeddings, norms or the head).
bool IsLinearWeight(const SafetensorsTensorSpec& t) {
  if (t.shape.size() != 2 || !internal::IsFp8Wide(t.dtype)) return false;
  for (const char* suffix : {"_proj.weight", "linear_qkv.weight", "linear_proj.weight",
                             "linear_fc1.weight", "linear_fc2.weight"}) {
    if (absl::EndsWith(t.name, suffix)) return true;
  }
  return false;
}

}  // namespace

void AddWeightMapOptions(CLI::App* cmd, WeightMapOptions* options) {
  CLI::Option* map = cmd->add_option("--map", options->map,
                  "the engine's layout: a built-in weight map (vllm-llama: fused qkv_proj and "
                  "gate_up_proj, vocabulary padded to a multiple of 64; megatron-llama) or a "
                  "MAP.json of rename, fuse, split, pad and regroup rules")
      ->check(CLI::Validator(
          [](std::string& value) {
            return value.empty()
                       ? std::string("empty: give vllm-llama, megatron-llama or a MAP.json")
                       : std::string();
          },
          "MAP"));
  cmd->add_option("--head-size", options->head_size,
                  "attention head size for a built-in map (default: SRC's config.json)")
      ->check(WholeNumber(1, int64_t{1} << 20))
      ->needs(map);
  cmd->add_option("--cast", options->cast,
                  "the dtype of every floating tensor in the engine's layout (bf16, f16, f32), "
                  "or float8_e4m3fn linear weights with a float32 scale per 128 x 128 block "
                  "(fp8-block: '<weight>_scale_inv') or per tensor (fp8-tensor: '<weight>_scale')")
      ->check(CLI::IsMember({"bf16", "f16", "f32", "fp8-block", "fp8-tensor"}));
}

absl::StatusOr<std::optional<WeightMap>> ParseWeightMap(
    const WeightMapOptions& options, const std::string& src,
    const std::vector<SafetensorsTensorSpec>& sources) {
  if (options.map.empty()) return std::nullopt;
  if (options.map == "vllm-llama" || options.map == "megatron-llama") {
    SDRT_ASSIGN_OR_RETURN(const ModelConfig config, ModelConfigOf(src));
    const int64_t head_size = options.head_size > 0 ? options.head_size : config.head_size;
    if (options.head_size == 0 && !config.bad.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--map ", options.map, ": ", config.bad));
    }
    if (head_size == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--map ", options.map, " needs --head-size (",
          config.found ? "SRC's config.json gives neither head_dim nor hidden_size and "
                         "num_attention_heads"
                       : "SRC has no config.json that gives it",
          ")"));
    }
    SDRT_ASSIGN_OR_RETURN(WeightMap map, WeightMap::Builtin(options.map, head_size));
    if (options.map == "megatron-llama") {
      return WithSplitSizes(map, SplitRowsOf(config, head_size, sources));
    }
    return map;
  }
  absl::StatusOr<std::string> text = internal::ReadBoundedFile(options.map, kMaxJsonBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--map ", options.map, ": ", text.status().message(),
                     " (neither a built-in map, vllm-llama or megatron-llama, nor a MAP.json)"));
  }
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(*text);
  if (!map.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--map ", options.map, ": ",
                                                   map.status().message()));
  }
  return std::optional<WeightMap>(*std::move(map));
}

namespace {

// How many parts `placements` on `mesh` cut dim `dim` into.
int64_t CutsOf(const std::vector<Placement>& placements, const DeviceMesh& mesh, int dim) {
  int64_t n = 1;
  for (size_t i = 0; i < placements.size(); ++i) {
    if (placements[i].kind() == Placement::Kind::kShard && placements[i].dim() == dim) {
      n *= mesh.size(static_cast<int>(i));
    }
  }
  return n;
}

// EngineTensors of both kinds: `parts` says how many parts the engine's layout cuts a dim
// of a destination tensor into.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> EngineTensorsCut(
    const std::optional<WeightMap>& map, const WeightMapOptions& options,
    const std::vector<SafetensorsTensorSpec>& sources, const WeightMap::PartsOf& parts) {
  std::vector<SafetensorsTensorSpec> tensors = sources;
  if (map.has_value()) {
    SDRT_ASSIGN_OR_RETURN(tensors, map->DestinationTensors(sources, parts));
  }
  if (absl::StartsWith(options.cast, "fp8")) {
    for (SafetensorsTensorSpec& t : tensors) {
      if (IsLinearWeight(t)) t.dtype = DType::kFloat8E4M3FN;
    }
  } else if (!options.cast.empty()) {
    const DType to = options.cast == "bf16"  ? DType::kBFloat16
                     : options.cast == "f16" ? DType::kFloat16
                                             : DType::kFloat32;
    // FP8 codes are dequantized with their scales, which the engine then does not hold
    // (the map's fused scales neither).
    std::set<std::string> codes;
    const std::vector<SafetensorsTensorSpec>* lists[] = {&sources, &tensors};
    for (const std::vector<SafetensorsTensorSpec>* list : lists) {
      for (const SafetensorsTensorSpec& t : *list) {
        if (internal::IsFp8Codes(t.dtype)) codes.insert(t.name);
      }
    }
    std::vector<SafetensorsTensorSpec> kept;
    for (SafetensorsTensorSpec& t : tensors) {
      const bool scales = (absl::EndsWith(t.name, "_scale_inv") &&
                           codes.count(t.name.substr(0, t.name.size() - 10))) ||
                          (absl::EndsWith(t.name, "_scale") &&
                           codes.count(t.name.substr(0, t.name.size() - 6)));
      if (scales) continue;
      if (CastKindOf(t.dtype) == CastKind::kFloat) t.dtype = to;
      kept.push_back(std::move(t));
    }
    tensors = std::move(kept);
  }
  return tensors;
}

}  // namespace

absl::StatusOr<std::vector<SafetensorsTensorSpec>> EngineTensors(
    const std::optional<WeightMap>& map, const WeightMapOptions& options,
    const std::vector<SafetensorsTensorSpec>& sources, const ShardingPlan& plan,
    const DeviceMesh& mesh) {
  return EngineTensorsCut(
      map, options, sources,
      [&](absl::string_view name, const IntVector& shape, int dim) -> absl::StatusOr<int64_t> {
        SDRT_ASSIGN_OR_RETURN(const std::vector<Placement> placements,
                              plan.PlacementsFor(name, shape, mesh));
        return CutsOf(placements, mesh, dim);
      });
}

absl::StatusOr<std::vector<SafetensorsTensorSpec>> EngineTensors(
    const std::optional<WeightMap>& map, const WeightMapOptions& options,
    const std::vector<SafetensorsTensorSpec>& sources, const ParallelLayout& layout) {
  // One stage: a tensor placed alone is on the first (its stage does not change its cut).
  const ParallelLayout one_stage = layout.WithOneStage();
  return EngineTensorsCut(
      map, options, sources,
      [&](absl::string_view name, const IntVector& shape, int dim) -> absl::StatusOr<int64_t> {
        SafetensorsTensorSpec alone;
        alone.name = std::string(name);
        alone.shape = shape;
        SDRT_ASSIGN_OR_RETURN(const std::vector<LaidOutTensor> placed, one_stage.Place({alone}));
        return CutsOf(placed[0].placements, *placed[0].mesh, dim);
      });
}

absl::Status AddScaleLeaves(const WeightMapOptions& options, int64_t rank, Map& local) {
  if (!absl::StartsWith(options.cast, "fp8")) return absl::OkStatus();
  const bool block = options.cast == "fp8-block";
  std::vector<std::pair<std::string, Value>> scales;
  SDRT_ASSIGN_OR_RETURN(const internal::Leaves leaves, internal::CollectLeaves(local));
  for (const internal::Leaf& leaf : leaves) {
    if (leaf.value->kind() != ValueKind::kDTensor) continue;
    const DTensor& w = leaf.value->as_dtensor();
    if (w.dtype() != DType::kFloat8E4M3FN) continue;
    const IntVector& shape = w.global_shape();
    IntVector global{1};
    std::vector<Placement> placements(w.placements().size(), Placement::Replicate());
    if (block) {
      global = {(shape[0] + kFp8Block - 1) / kFp8Block, (shape[1] + kFp8Block - 1) / kFp8Block};
      placements = w.placements();
    }
    SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                          ComputeLocalShapeAndGlobalOffset(global, *w.mesh(), placements, rank));
    SDRT_ASSIGN_OR_RETURN(const Tensor meta, Tensor::Meta(info.local_shape, DType::kFloat32));
    SDRT_ASSIGN_OR_RETURN(DTensor d, DTensor::Make(meta, w.mesh(), placements, global));
    scales.emplace_back(absl::StrCat(leaf.path, block ? "_scale_inv" : "_scale"),
                        Value(std::move(d)));
  }
  for (auto& [path, value] : scales) local.Set(path, std::move(value));
  return absl::OkStatus();
}

}  // namespace sdrt::cli
