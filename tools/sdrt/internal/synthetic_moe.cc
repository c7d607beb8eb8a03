// The Mixture-of-Experts architectures of `sdrt make` (synthetic.h): their sizes, scaling and
// tensors, with the names and shapes (nn.Linear [out, in]) the real checkpoints'
// model.safetensors.index.json list.
//
// "qwen3-moe", Qwen3-235B-A22B (Qwen3MoeForCausalLM): hidden 4096, 94 layers, 64 query / 4
// kv heads of head_dim 128 (q_proj [8192, 4096], no biases) with self_attn.q_norm and k_norm
// [head_dim], vocab 151936, lm_head not tied; every layer MoE: router mlp.gate [128, 4096]
// and 128 experts mlp.experts.E.{gate,up,down}_proj of width 1536, no shared expert.
// (config.json's intermediate_size, 12288, is kept in the config but no layer uses it.)
// 235,093,634,560 parameters.
//
// "deepseek-v3", DeepSeek-V3 (DeepseekV3ForCausalLM): hidden 7168, 61 layers, the first 3
// dense (mlp.{gate,up,down}_proj, 18432), the other 58 MoE: router mlp.gate [256, 7168] and
// mlp.gate.e_score_correction_bias [256] (float32, as in the checkpoint), 256 experts of
// width 2048 and one mlp.shared_experts.{gate,up,down}_proj of width 2048. MLA with 128
// heads: self_attn.q_a_proj [1536, 7168], q_a_layernorm [1536], q_b_proj [128 * (128 + 64),
// 1536], kv_a_proj_with_mqa [512 + 64, 7168], kv_a_layernorm [512], kv_b_proj [128 * (128 +
// 128), 512], o_proj [7168, 128 * 128]; vocab 129280, lm_head not tied. Left out: the
// multi-token-prediction layer (model.layers.61.*, about 14B) and the FP8 checkpoint's
// weight_scale_inv tensors: the weights are the bf16 (or --dtype) ones. 671,026,419,200
// parameters.
//
// "kimi-k2", Kimi-K2 (DeepSeek-V3's architecture, names and sizes) with the first 1 of 61
// layers dense, 384 routed experts, 64 heads and vocab 163840. 1,026,408,232,448 parameters.
//
// "glm-moe": GLM-4.5's shapes (Glm4MoeForCausalLM; the issue names "GLM-5.2", whose config is
// not public here): hidden 5120, 92 layers, the first 3 dense (12288), then MoE with 160
// experts of width 1536, one shared expert, router mlp.gate [160, 5120] and
// e_score_correction_bias [160] (float32); 96 query / 8 kv heads of head_dim 128 with
// q/k/v_proj biases (o_proj without) and q_norm / k_norm [128] (GLM-4.5 has use_qk_norm, its
// Air variant not); vocab 151552, lm_head not tied. Its MTP layer (model.layers.92.*) is
// left out: 352,797,829,024 parameters (355B with it).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::cli::synthetic_internal {
namespace {

// The largest tensor count ScaledMoeArch accepts: a safetensors header (at most 100 MB)
// takes some 100 bytes per tensor of these names.
constexpr int64_t kMaxTensors = 1'000'000;

struct BaseMoeArch {
  const char* name;
  ArchFamily family;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab;
  int64_t experts, moe_intermediate, shared_experts, dense_layers;
  int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
};

constexpr BaseMoeArch kMoeArchs[] = {
    {"qwen3-moe", ArchFamily::kQwen3Moe, 4096, 12288, 94, 64, 4, 128, 151936,  //
     128, 1536, 0, 0, 0, 0, 0, 0, 0},
    {"deepseek-v3", ArchFamily::kDeepseekV3, 7168, 18432, 61, 128, 128, 0, 129280,  //
     256, 2048, 1, 3, 1536, 512, 128, 64, 128},
    {"kimi-k2", ArchFamily::kDeepseekV3, 7168, 18432, 61, 64, 64, 0, 163840,  //
     384, 2048, 1, 1, 1536, 512, 128, 64, 128},
    {"glm-moe", ArchFamily::kGlmMoe, 5120, 12288, 92, 96, 8, 128, 151552,  //
     160, 1536, 1, 3, 0, 0, 0, 0, 0},
};

bool IsMla(const ArchConfig& c) { return c.family == ArchFamily::kDeepseekV3; }

// Tensors per layer (attention, norms and MLP) and in the whole state dict.
int64_t TensorCount(const ArchConfig& c) {
  const int64_t attention = IsMla(c) ? 7 : c.family == ArchFamily::kGlmMoe ? 9 : 6;
  const int64_t dense = attention + 2 + 3;
  const int64_t router = c.family == ArchFamily::kQwen3Moe ? 1 : 2;
  const int64_t moe = attention + 2 + router + 3 * c.experts + 3 * c.shared_experts;
  return 3 + c.dense_layers * dense + (c.layers - c.dense_layers) * moe;
}

}  // namespace

std::vector<std::string> MoeArchNames() {
  std::vector<std::string> out;
  for (const BaseMoeArch& a : kMoeArchs) out.emplace_back(a.name);
  return out;
}

absl::StatusOr<ArchConfig> ScaledMoeArch(absl::string_view arch, double scale, bool* found) {
  *found = false;
  for (const BaseMoeArch& a : kMoeArchs) {
    if (arch != a.name) continue;
    *found = true;
    ArchConfig c;
    c.name = a.name;
    c.family = a.family;
    c.hidden = Scaled(a.hidden, scale);
    c.intermediate = Scaled(a.intermediate, scale);
    c.layers = Scaled(a.layers, scale);
    c.heads = a.heads;
    c.kv_heads = a.kv_heads;
    c.vocab = Scaled(a.vocab, scale);
    c.experts = Scaled(a.experts, scale);
    c.moe_intermediate = Scaled(a.moe_intermediate, scale);
    c.shared_experts = a.shared_experts;
    // The leading dense layers are kept, but one layer at least stays MoE.
    c.dense_layers = std::min(a.dense_layers, c.layers - 1);
    if (a.q_lora_rank > 0) {
      c.q_lora_rank = Scaled(a.q_lora_rank, scale);
      c.kv_lora_rank = Scaled(a.kv_lora_rank, scale);
      c.qk_nope_head_dim = Scaled(a.qk_nope_head_dim, scale);
      c.qk_rope_head_dim = Scaled(a.qk_rope_head_dim, scale);
      c.v_head_dim = Scaled(a.v_head_dim, scale);
      c.head_dim = c.qk_nope_head_dim + c.qk_rope_head_dim;
    } else {
      c.head_dim = Scaled(a.head_dim, scale);
    }
    const int64_t tensors = TensorCount(c);
    if (tensors > kMaxTensors) {
      return absl::InvalidArgumentError(
          absl::StrCat("--scale ", scale, " gives ", a.name, " ", tensors, " tensors (", c.layers,
                       " layers of ", c.experts, " experts): more than the ", kMaxTensors,
                       " a safetensors header (at most 100 MB) can list"));
    }
    return c;
  }
  return ArchConfig();
}

std::vector<Spec> MoeSpecs(const ArchConfig& c) {
  std::vector<Spec> out;
  out.reserve(static_cast<size_t>(TensorCount(c)));
  auto weight = [&](std::string name, int64_t rows, int64_t cols) {
    out.push_back({std::move(name), {rows, cols}, Init::kWeight});
  };
  auto vec = [&](std::string name, int64_t n, Init init) {
    out.push_back({std::move(name), {n}, init});
  };
  // An MLP of `width`: what a dense layer, each expert and the shared expert hold.
  auto mlp = [&](const std::string& p, int64_t width) {
    weight(p + "gate_proj.weight", width, c.hidden);
    weight(p + "up_proj.weight", width, c.hidden);
    weight(p + "down_proj.weight", c.hidden, width);
  };
  const int64_t h = c.hidden;
  weight("model.embed_tokens.weight", c.vocab, h);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    if (IsMla(c)) {
      const int64_t rope = c.qk_rope_head_dim;
      weight(p + "self_attn.q_a_proj.weight", c.q_lora_rank, h);
      vec(p + "self_attn.q_a_layernorm.weight", c.q_lora_rank, Init::kNorm);
      weight(p + "self_attn.q_b_proj.weight", c.heads * (c.qk_nope_head_dim + rope), c.q_lora_rank);
      weight(p + "self_attn.kv_a_proj_with_mqa.weight", c.kv_lora_rank + rope, h);
      vec(p + "self_attn.kv_a_layernorm.weight", c.kv_lora_rank, Init::kNorm);
      weight(p + "self_attn.kv_b_proj.weight", c.heads * (c.qk_nope_head_dim + c.v_head_dim),
             c.kv_lora_rank);
      weight(p + "self_attn.o_proj.weight", h, c.heads * c.v_head_dim);
    } else {
      const bool bias = c.family == ArchFamily::kGlmMoe;
      const int64_t q = c.heads * c.head_dim;
      const int64_t kv = c.kv_heads * c.head_dim;
      for (const auto& [proj, rows] :
           {std::pair<const char*, int64_t>{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
        weight(absl::StrCat(p, "self_attn.", proj, ".weight"), rows, h);
        if (bias) vec(absl::StrCat(p, "self_attn.", proj, ".bias"), rows, Init::kBias);
      }
      weight(p + "self_attn.o_proj.weight", h, q);
      vec(p + "self_attn.q_norm.weight", c.head_dim, Init::kNorm);
      vec(p + "self_attn.k_norm.weight", c.head_dim, Init::kNorm);
    }
    if (i < c.dense_layers) {
      mlp(p + "mlp.", c.intermediate);
    } else if (c.family == ArchFamily::kQwen3Moe) {
      // Qwen3MoeSparseMoeBlock: the router, then the experts.
      weight(p + "mlp.gate.weight", c.experts, h);
      for (int64_t e = 0; e < c.experts; ++e) {
        mlp(absl::StrCat(p, "mlp.experts.", e, "."), c.moe_intermediate);
      }
    } else {
      // DeepseekV3MoE and Glm4MoeMoE: the experts, the router, the shared expert.
      for (int64_t e = 0; e < c.experts; ++e) {
        mlp(absl::StrCat(p, "mlp.experts.", e, "."), c.moe_intermediate);
      }
      weight(p + "mlp.gate.weight", c.experts, h);
      out.push_back({p + "mlp.gate.e_score_correction_bias",
                     {c.experts},
                     Init::kBias,
                     /*float32=*/true});
      if (c.shared_experts > 0) {
        mlp(p + "mlp.shared_experts.", c.shared_experts * c.moe_intermediate);
      }
    }
    vec(p + "input_layernorm.weight", h, Init::kNorm);
    vec(p + "post_attention_layernorm.weight", h, Init::kNorm);
  }
  vec("model.norm.weight", h, Init::kNorm);
  weight("lm_head.weight", c.vocab, h);
  return out;
}

std::vector<std::pair<std::string, int64_t>> MoeSizes(const ArchConfig& c) {
  const std::pair<const char*, int64_t> all[] = {
      {"experts", c.experts},
      {"moe_intermediate", c.moe_intermediate},
      {"shared_experts", c.shared_experts},
      {"dense_layers", c.dense_layers},
      {"q_lora_rank", c.q_lora_rank},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_nope_head_dim", c.qk_nope_head_dim},
      {"qk_rope_head_dim", c.qk_rope_head_dim},
      {"v_head_dim", c.v_head_dim},
  };
  std::vector<std::pair<std::string, int64_t>> out;
  if (c.experts == 0) return out;  // a dense family
  for (const auto& [key, value] : all) {
    // dense_layers and shared_experts are told even when 0 (qwen3-moe).
    if (value != 0 || absl::string_view(key) == "dense_layers" ||
        absl::string_view(key) == "shared_experts") {
      out.emplace_back(key, value);
    }
  }
  return out;
}

}  // namespace sdrt::cli::synthetic_internal
