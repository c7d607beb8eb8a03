// Weight maps (issue 30): how an engine's own tensors are made from a source's, so that a
// load or a weight sync goes straight into an inference engine's fused, padded, renamed
// buffers, with no full tensor built anywhere. A map is a list of rules over the source
// names (RE2 patterns, matched against the whole name); the first rule whose pattern
// matches a source name takes it, and a source no rule matches keeps its name. Templates
// name the destination: "{i}" is the capture group named i ("(?P<i>\d+)"), "{1}" the first
// group, "{{" and "}}" are braces.
//
//   rename  one source -> one destination of the same shape under another name
//           (model.layers.{i}.self_attn.o_proj.weight -> layers.{i}.attn.out.weight).
//   fuse    several sources (one pattern each, in order: the components) -> one destination
//           holding them along `dim`, interleaved (below); each component's destination
//           name comes from its own pattern's captures, and all must name the same one.
//   split   one fused source -> several destinations (one template each): fuse's inverse.
//   pad     one source -> a destination larger along `dim` (its size the source's rounded
//           up to `multiple`): the source's elements first, the rest zero.
//   regroup one fused source -> one fused destination of the same components held another
//           way (`source_interleave` the source's, `interleave` the destination's; `sizes`
//           the components' sizes along `dim`, as the unfused tensors have them): a
//           Megatron trainer's linear_qkv (kGroups) straight into vLLM's qkv_proj (kShards),
//           a split and a fuse in one rule, with no component tensor anywhere.
//
// How a fused tensor holds its components along `dim` (its size there is the sum over the
// components, times the parts for kShards):
//   kShards  vLLM's tensor parallelism: the fused tensor is cut into as many equal parts
//            along `dim` as the destination's (fuse) or source's (split) layout cuts it,
//            and part p is [component 0's p-th piece; component 1's p-th piece; ...]: a
//            tp rank's local qkv_proj is [its q heads; its k heads; its v heads]. With a
//            head size, a component of n heads is cut by whole heads: parts % n == 0
//            gives part p the heads [p n / parts, (p + 1) n / parts); with fewer heads
//            than parts (n divides parts) part p holds head p / (parts / n), several
//            parts holding one head (grouped-query attention's kv replication). Without a
//            head size each component is cut into equal rows.
//   kGroups  Megatron's interleaving by query group: group g is [component 0's g-th
//            piece; component 1's g-th piece; ...] for G groups (each component cut into
//            G equal pieces): linear_qkv is [q of group g; k of g; v of g] for each g.
//            G is `groups`, or (0) the second component's heads (its rows along dim
//            over the head size: the kv heads). G = 1 is plain concatenation ([gate; up]).
//
// Casts need no rule: a destination of another float dtype than its source is converted
// (reshard_state_dict.h). Nor does FP8: a destination leaf of float8_e4m3fn or float8_e5m2
// next to a leaf named as it plus "_scale_inv" (float32 or float8_e8m0fnu, a scale per 128 x
// 128 block of each source tensor: shape [ceil(rows / 128), ceil(cols / 128)] per local,
// for 2-D tensors) or plus "_scale" (one element per local, the scale of the whole
// destination tensor) is quantized from its float32 / bfloat16 / float16 sources as PyTorch's
// recipe does (scale = amax / finfo.max, 1 for all zeros; e8m0 rounded up to a power of two;
// codes = (x / scale).to(fp8)), fused, padded or as it is, with any map or none; block scales
// need each piece to start at a multiple of 128 in its source and its local (InvalidArgument
// naming the tensor and rank, on every rank, before any byte moves). The inverse too: a
// source of fp8 codes beside a source named as it plus "_scale_inv" or "_scale" (as above),
// taken by a float32 / bfloat16 / float16 destination, is dequantized ((q.float() * scale)
// .to(dtype)); codes with their scales into fp8 leaves move as they are, fused (or
// regrouped) too when each source has block scales: the scales then follow by the same rule
// counted in 128-row blocks (whole blocks needed). A split into FP8 parts quantizes by the
// blocks of its source, each part's own when every part starts at a block (block scales
// only: one scale per part is InvalidArgument), and a regroup dequantizes as a fuse does.
// CPU and CUDA tensors alike (the amax, codes and dequantization run where the local is).
// The map is applied by PlanReshard (ReshardOptions::weight_map): every rule is checked
// against every rank's leaves there, on every rank alike.
#ifndef SDRT_CORE_DISTRIBUTED_WEIGHT_MAP_H_
#define SDRT_CORE_DISTRIBUTED_WEIGHT_MAP_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/export.h"
#include "sdrt/tensor/shape.h"

namespace sdrt SDRT_API {

struct WeightMapRule {
  enum class Kind { kRename, kFuse, kSplit, kPad, kRegroup };
  enum class Interleave { kShards, kGroups };
  Kind kind = Kind::kRename;
  // RE2 patterns over source names: one, or one per component for kFuse.
  std::vector<std::string> from;
  // Destination name templates: one, or one per component for kSplit. kPad may leave it
  // empty (the source's name).
  std::vector<std::string> to;
  int dim = 0;  // kFuse, kSplit, kPad, kRegroup: the dim along which tensors are fused or padded
  // kFuse, kSplit: how the fused tensor holds its components; kRegroup: how the destination does.
  Interleave interleave = Interleave::kShards;
  int64_t head_size = 0;  // kFuse, kSplit, kRegroup: elements along dim per head; 0: by rows
  int64_t groups = 0;     // kGroups: the group count; 0: the second component's heads
  int64_t multiple = 1;   // kPad: the destination's size along dim is a multiple of it
  // kRegroup: how the source holds the components.
  Interleave source_interleave = Interleave::kGroups;
  // The components' sizes along dim (each in [0, 2^40]; q, k, v: heads times the head size):
  // a kRegroup's (2 to 16, required), or a kSplit's (one per template, optional: with them
  // DestinationTensors can list a split's destinations, and the lowering checks them).
  std::vector<int64_t> sizes;
};

// A checked, compiled weight map: a value; copies share the compiled patterns.
class WeightMap {
 public:
  // Checks and compiles `rules`. InvalidArgument naming the rule (its index and kind) for
  // a pattern RE2 refuses or a template naming a group its pattern does not have; the
  // wrong number of patterns or templates for the kind (fuse and split: at least 2
  // components, at most 16); dim outside [0, 12); head_size, groups or multiple out of
  // range (negative, or multiple < 1, or any above 2^40); more than 10,000 rules or a
  // pattern or template of more than 4,096 bytes, a template holding a NUL byte; sizes on
  // a rule that is neither a regroup nor a split, a regroup without 2 to 16 of them, a
  // split's not one per template, a size outside [0, 2^40].
  static absl::StatusOr<WeightMap> FromRules(std::vector<WeightMapRule> rules);

  // A map from its JSON text (at most 1 MiB): {"rules": [rule, ...]}, each rule an object
  // with one of "rename", "pad" (a pattern), "fuse" (an array of patterns), "split" (a
  // pattern), and "to" (a template; an array of them for split; optional for pad), "dim",
  // "interleave" ("shards" or "groups"), "head_size", "groups", "multiple", "sizes" (an array
  // of integers) as the fields above; a regroup has "regroup" (a pattern), "to",
  // "from_interleave" (its source's, default "groups") and "sizes". Unknown keys are refused. InvalidArgument naming the rule for malformed JSON, a
  // field of the wrong type, and FromRules' errors.
  static absl::StatusOr<WeightMap> FromJson(absl::string_view text);

  // The built-in maps, from HF Llama-family names (Llama, Mistral, Qwen2):
  //   "vllm-llama": into vLLM-style tensor-parallel buffers:
  //     model.layers.{i}.self_attn.{q,k,v}_proj.weight -> ...self_attn.qkv_proj.weight
  //       (kShards, head_size: the attention head size),
  //     model.layers.{i}.mlp.{gate,up}_proj.weight -> ...mlp.gate_up_proj.weight (kShards),
  //     model.embed_tokens.weight and lm_head.weight padded to a multiple of 64 rows;
  //     every other name unchanged.
  //   "megatron-llama": from Megatron-core names into HF's: decoder.layers.{i}.
  //     self_attention.linear_qkv.weight split into q, k, v (kGroups, the kv heads as
  //     groups), mlp.linear_fc1.weight into gate and up ([gate; up]), linear_proj ->
  //     o_proj, linear_fc2 -> down_proj, the fused layer norms -> input_layernorm and
  //     post_attention_layernorm, embedding.word_embeddings -> model.embed_tokens,
  //     decoder.final_layernorm -> model.norm, output_layer -> lm_head.
  // `head_size` (> 0): the attention head size (config.json's head_dim, or hidden_size /
  // num_attention_heads). InvalidArgument for another name or head size.
  static absl::StatusOr<WeightMap> Builtin(absl::string_view name, int64_t head_size);

  // How many equal parts a destination layout cuts dim `dim` of the tensor `name` (whose
  // shape has the rank of `shape`, its other dims as `shape`) into: a kShards fuse's parts.
  using PartsOf =
      std::function<absl::StatusOr<int64_t>(absl::string_view name, const IntVector& shape,
                                            int dim)>;

  // The tensors a destination of this map holds, made from `sources` (a checkpoint's tensor
  // list), in the order of their first source: a source no rule takes as it is; a rename's
  // under its new name; a pad's with its dim rounded up; a fuse's with its dim the
  // components' sum (kGroups) or `parts` times what a part holds (kShards, kv heads
  // replicated as the rule says), its dtype the first component's; a regroup's with its dim
  // as the destination's interleave holds `sizes`; a split's destinations (with sizes) in
  // their templates' order, each the source's shape with `dim` its size; FP8 codes fused
  // from components each
  // beside "<name>_scale_inv" get "<fused>_scale_inv" right after them (the components'
  // scales fused like the codes, in 128-row blocks, theirs left out) when the components
  // and the head size are whole blocks (else the scales stay as they are). What an engine
  // allocates for this map (ShardingPlan::MetaStateDict of the result). InvalidArgument
  // naming the rule and tensor: a split (its destinations' shapes are not known from its
  // source alone without the rule's sizes: give them, or the destination state dict), a
  // split or regroup from kShards (a full source's parts are unknown), a split or
  // regroup whose source's dim is not what `sizes` make, a fuse missing a component or whose
  // components differ off the dim or in dtype, heads or rows that do not divide, a dim the
  // tensor lacks; `parts`' errors.
  absl::StatusOr<std::vector<SafetensorsTensorSpec>> DestinationTensors(
      const std::vector<SafetensorsTensorSpec>& sources, const PartsOf& parts) const;

  WeightMap() = default;  // no rules: every source keeps its name
  const std::vector<WeightMapRule>& rules() const;
  // A canonical text of the rules, equal for equal maps (the agreement compares it).
  std::string Describe() const;

  struct Compiled;
  const Compiled* compiled() const { return compiled_.get(); }

 private:
  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_WEIGHT_MAP_H_
