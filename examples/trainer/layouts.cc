// The trainer example's layouts (layouts.h).
#include "layouts.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

namespace trainer_example {
namespace {

const std::string kLayer = "decoder.layers.0.";

// The Hugging Face tensor each Megatron tensor that is not fused is.
const std::pair<const char*, const char*> kRenamed[] = {
    {"embedding.word_embeddings.weight", "embed_tokens"},
    {"decoder.layers.0.self_attention.linear_qkv.layer_norm_weight", "input_layernorm"},
    {"decoder.layers.0.self_attention.linear_proj.weight", "o_proj"},
    {"decoder.layers.0.mlp.linear_fc1.layer_norm_weight", "post_attention_layernorm"},
    {"decoder.layers.0.mlp.linear_fc2.weight", "down_proj"},
    {"decoder.final_layernorm.weight", "norm"},
    {"output_layer.weight", "lm_head"},
};

}  // namespace

std::vector<Weight> MegatronWeights() {
  return {
      {"embedding.word_embeddings.weight", {kVocab, kHidden}},
      {kLayer + "self_attention.linear_qkv.layer_norm_weight", {kHidden}},
      {kLayer + "self_attention.linear_qkv.weight", {(kHeads + 2 * kKvHeads) * kHead, kHidden}},
      {kLayer + "self_attention.linear_proj.weight", {kHidden, kHeads * kHead}},
      {kLayer + "mlp.linear_fc1.layer_norm_weight", {kHidden}},
      {kLayer + "mlp.linear_fc1.weight", {2 * kIntermediate, kHidden}},
      {kLayer + "mlp.linear_fc2.weight", {kHidden, kIntermediate}},
      {"decoder.final_layernorm.weight", {kHidden}},
      {"output_layer.weight", {kVocab, kHidden}},
  };
}

std::vector<HfWeight> HfWeights() {
  const std::string layer = "model.layers.0.";
  return {
      {"model.embed_tokens.weight", "embed_tokens", {kVocab, kHidden}},
      {layer + "input_layernorm.weight", "input_layernorm", {kHidden}},
      {layer + "self_attn.q_proj.weight", "q_proj", {kHeads * kHead, kHidden}},
      {layer + "self_attn.k_proj.weight", "k_proj", {kKvHeads * kHead, kHidden}},
      {layer + "self_attn.v_proj.weight", "v_proj", {kKvHeads * kHead, kHidden}},
      {layer + "self_attn.o_proj.weight", "o_proj", {kHidden, kHeads * kHead}},
      {layer + "post_attention_layernorm.weight", "post_attention_layernorm", {kHidden}},
      {layer + "mlp.gate_proj.weight", "gate_proj", {kIntermediate, kHidden}},
      {layer + "mlp.up_proj.weight", "up_proj", {kIntermediate, kHidden}},
      {layer + "mlp.down_proj.weight", "down_proj", {kHidden, kIntermediate}},
      {"model.norm.weight", "norm", {kHidden}},
      {"lm_head.weight", "lm_head", {kVocab, kHidden}},
  };
}

float HfValue(const std::string& hf, int64_t row, int64_t col, int step) {
  int64_t salt = 0;
  for (char c : hf) salt = (salt * 31 + c) % 64;
  return static_cast<float>((row * 7 + col * 3 + salt) % 64) / 8 - 4 + 0.25f * step;
}

Origin MegatronOrigin(const std::string& name, int64_t row, int64_t col) {
  if (name == kLayer + "self_attention.linear_qkv.weight") {
    // Group g: its kHeads / kKvHeads q heads, then k head g, then v head g.
    const int64_t per_group = kHeads / kKvHeads, group_rows = (per_group + 2) * kHead;
    const int64_t g = row / group_rows, at = row % group_rows;
    if (at < per_group * kHead) return {"q_proj", g * per_group * kHead + at, col};
    if (at < (per_group + 1) * kHead) return {"k_proj", g * kHead + at - per_group * kHead, col};
    return {"v_proj", g * kHead + at - (per_group + 1) * kHead, col};
  }
  if (name == kLayer + "mlp.linear_fc1.weight") {
    return row < kIntermediate ? Origin{"gate_proj", row, col}
                               : Origin{"up_proj", row - kIntermediate, col};
  }
  for (const auto& [megatron, hf] : kRenamed) {
    if (name == megatron) return {hf, row, col};
  }
  std::fprintf(stderr, "trainer: no layout for '%s'\n", name.c_str());
  std::abort();
}

Origin VllmOrigin(const std::string& name, int64_t rank, int64_t ranks, int64_t row,
                  int64_t col) {
  const std::string layer = "model.layers.0.";
  if (name == layer + "self_attn.qkv_proj.weight") {
    // This rank's q heads, then its kv heads: its share, or the one kv head it replicates.
    const int64_t q_heads = kHeads / ranks;
    const int64_t kv_heads = kKvHeads >= ranks ? kKvHeads / ranks : 1;
    const int64_t first_kv = kKvHeads >= ranks ? rank * kv_heads : rank / (ranks / kKvHeads);
    if (row < q_heads * kHead) return {"q_proj", rank * q_heads * kHead + row, col};
    row -= q_heads * kHead;
    if (row < kv_heads * kHead) return {"k_proj", first_kv * kHead + row, col};
    return {"v_proj", first_kv * kHead + row - kv_heads * kHead, col};
  }
  if (name == layer + "mlp.gate_up_proj.weight") {
    const int64_t n = kIntermediate / ranks;
    return row < n ? Origin{"gate_proj", rank * n + row, col}
                   : Origin{"up_proj", rank * n + row - n, col};
  }
  if (name == layer + "self_attn.o_proj.weight") return {"o_proj", row, rank * (kHidden / ranks) + col};
  if (name == layer + "mlp.down_proj.weight") {
    return {"down_proj", row, rank * (kIntermediate / ranks) + col};
  }
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") {
    const int64_t global = rank * (kPaddedVocab / ranks) + row;
    if (global >= kVocab) return {};  // a pad row
    return {name == "lm_head.weight" ? "lm_head" : "embed_tokens", global, col};
  }
  if (name == layer + "input_layernorm.weight") return {"input_layernorm", row, col};
  if (name == layer + "post_attention_layernorm.weight") {
    return {"post_attention_layernorm", row, col};
  }
  if (name == "model.norm.weight") return {"norm", row, col};
  std::fprintf(stderr, "trainer: no layout for '%s'\n", name.c_str());
  std::abort();
}

sdrt::WeightMap MegatronToVllm() {
  using Kind = sdrt::WeightMapRule::Kind;
  const std::string layer = R"(decoder\.layers\.(?P<i>\d+)\.)";
  const std::string engine = "model.layers.{i}.";
  std::vector<sdrt::WeightMapRule> rules;
  const auto rule = [&](Kind kind, std::string from, std::string to) -> sdrt::WeightMapRule& {
    sdrt::WeightMapRule& r = rules.emplace_back();
    r.kind = kind;
    r.from = {std::move(from)};
    r.to = {std::move(to)};
    return r;
  };
  // linear_qkv, by query groups (one per kv head), into qkv_proj, cut by heads per part.
  sdrt::WeightMapRule& qkv = rule(Kind::kRegroup, layer + R"(self_attention\.linear_qkv\.weight)",
                                  engine + "self_attn.qkv_proj.weight");
  qkv.head_size = kHead;
  qkv.sizes = {kHeads * kHead, kKvHeads * kHead, kKvHeads * kHead};
  // linear_fc1 ([gate; up], one group) into gate_up_proj.
  sdrt::WeightMapRule& fc1 = rule(Kind::kRegroup, layer + R"(mlp\.linear_fc1\.weight)",
                                  engine + "mlp.gate_up_proj.weight");
  fc1.groups = 1;
  fc1.sizes = {kIntermediate, kIntermediate};
  rule(Kind::kPad, R"(embedding\.word_embeddings\.weight)", "model.embed_tokens.weight")
      .multiple = 64;
  rule(Kind::kPad, R"(output_layer\.weight)", "lm_head.weight").multiple = 64;
  rule(Kind::kRename, layer + R"(self_attention\.linear_proj\.weight)",
       engine + "self_attn.o_proj.weight");
  rule(Kind::kRename, layer + R"(mlp\.linear_fc2\.weight)", engine + "mlp.down_proj.weight");
  rule(Kind::kRename, layer + R"(self_attention\.linear_qkv\.layer_norm_weight)",
       engine + "input_layernorm.weight");
  rule(Kind::kRename, layer + R"(mlp\.linear_fc1\.layer_norm_weight)",
       engine + "post_attention_layernorm.weight");
  rule(Kind::kRename, R"(decoder\.final_layernorm\.weight)", "model.norm.weight");
  absl::StatusOr<sdrt::WeightMap> map = sdrt::WeightMap::FromRules(std::move(rules));
  if (!map.ok()) {
    std::fprintf(stderr, "trainer: %s\n", map.status().ToString().c_str());
    std::abort();
  }
  return *std::move(map);
}

}  // namespace trainer_example
