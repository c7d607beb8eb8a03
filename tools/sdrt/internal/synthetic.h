// Deterministic synthetic checkpoints with real architecture names and shape ratios, for
// `sdrt make` and the demos: the tensors a Llama, BERT, GPT-2 or Mixture-of-Experts (Qwen3,
// DeepSeek-V3, Kimi-K2, GLM-4.5: synthetic_moe.cc) state dict holds, filled with seeded
// noise (not a trained model). The same (arch, scale, dtype, seed) always gives the same
// bytes, on every machine.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_SYNTHETIC_H_
#define SDRT_TOOLS_SDRT_INTERNAL_SYNTHETIC_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::cli {

// kQwen3Moe: GQA with q_norm/k_norm, every layer MoE, no shared expert. kDeepseekV3: MLA
// attention, leading dense layers, then MoE with a shared expert and a router bias
// (DeepSeek-V3, Kimi-K2). kGlmMoe: GQA with q/k/v biases and q_norm/k_norm, leading dense
// layers, then MoE with a shared expert and a router bias (GLM-4.5).
enum class ArchFamily : uint8_t { kLlama, kBert, kGpt2, kQwen3Moe, kDeepseekV3, kGlmMoe };

// The sizes of one architecture, after scaling.
struct ArchConfig {
  std::string name;  // "llama-8b"
  ArchFamily family = ArchFamily::kLlama;
  int64_t hidden = 0;        // = heads * head_dim, except for the MoE families
  int64_t intermediate = 0;  // MLP width (of the dense layers, for the MoE families)
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // GQA; = heads elsewhere (and for MLA)
  int64_t head_dim = 0;  // MLA: qk_nope_head_dim + qk_rope_head_dim
  int64_t vocab = 0;
  int64_t max_positions = 0;  // BERT and GPT-2 position embeddings; 0 for the others (RoPE)
  int64_t type_vocab = 0;     // BERT token types
  // Mixture of experts; all 0 for the dense families.
  int64_t experts = 0;           // routed experts of each MoE layer
  int64_t moe_intermediate = 0;  // each expert's MLP width, also the shared expert's
  int64_t shared_experts = 0;    // 0 or 1: mlp.shared_experts, of moe_intermediate width
  int64_t dense_layers = 0;      // the leading layers with a dense MLP; the rest are MoE
  // Multi-head latent attention (kDeepseekV3); all 0 elsewhere.
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// The architectures `sdrt make` knows, in help order: "tiny-llama" (hidden 64, 4 heads / 2
// kv heads, intermediate 172, 2 layers, vocab 256: about 0.5 MB in float32), "llama-8b"
// (Llama 3 8B: 4096, 32 / 8, 14336, 32 layers, vocab 128256), "llama-70b" (8192, 64 / 8,
// 28672, 80, 128256), "bert-base" (768, 12 heads, 3072, 12 layers, vocab 30522, 512
// positions), "gpt2" (768, 12 heads, 3072, 12 layers, vocab 50257, 1024 positions), then
// the Mixture-of-Experts ones of synthetic_moe.cc (sizes there): "qwen3-moe"
// (Qwen3-235B-A22B), "deepseek-v3" (671B), "kimi-k2" (1T), "glm-moe" (GLM-4.5's shapes).
std::vector<std::string> ArchNames();

// The configuration of `arch` scaled by `scale` (> 0, at most 16): head_dim, intermediate,
// vocab and layers are multiplied by it and rounded to the nearest integer, at least 1;
// the head counts are kept (so the GQA ratio is) and hidden = heads * head_dim; position
// tables are kept. The MoE architectures scale the same way and also multiply hidden
// (theirs is not heads * head_dim), moe_intermediate, the expert count and the MLA ranks
// and head dims (each rounded, at least 1); the shared expert is kept, and so are the
// leading dense layers but at most layers - 1, so that every scaled model has an MoE layer
// (deepseek-v3 at 0.05: 3 layers, 2 dense, 13 experts). InvalidArgument naming an unknown
// arch (and the known ones), a bad scale, or a scale giving more than 1,000,000 tensors
// (no safetensors header could list them).
absl::StatusOr<ArchConfig> ScaledArch(absl::string_view arch, double scale);

// The state dict of `config` in the architecture's order and with its real names (Llama:
// model.embed_tokens.weight, model.layers.{i}.self_attn.{q,k,v,o}_proj.weight,
// model.layers.{i}.mlp.{gate,up,down}_proj.weight, model.layers.{i}.input_layernorm.weight,
// model.layers.{i}.post_attention_layernorm.weight, model.norm.weight, lm_head.weight;
// BERT and GPT-2 as Hugging Face saves BertModel and GPT2Model; the MoE families with the
// names of their Hugging Face checkpoints, synthetic_moe.cc). Shapes as nn.Linear
// ([out, in]), except GPT-2's Conv1D ([in, out]). Values: weights uniform in
// [-1, 1) / sqrt(fan_in), norm weights 1 + uniform [-0.1, 0.1), biases uniform
// [-0.02, 0.02); element i of a tensor comes from splitmix64(XXH64(name, seed) + i), so a
// tensor's values do not depend on the others. BERT's embeddings.position_ids is int64
// 0..max_positions-1; a router's mlp.gate.e_score_correction_bias is float32 (as in the
// real checkpoints) and filled as a bias. `dtype` is float32, float16 or bfloat16 (rounded
// to nearest even).
// Described up front and made one tensor at a time, so that a writer can stream it
// (`sdrt make`: WriteSafetensorsStreamed, memory near the largest tensor). Copyable.
class SyntheticStateDict {
 public:
  // InvalidArgument for any other dtype.
  static absl::StatusOr<SyntheticStateDict> Create(const ArchConfig& config, DType dtype,
                                                   uint64_t seed);

  // Every tensor's name, dtype and shape, in the architecture's order.
  const std::vector<SafetensorsTensorSpec>& specs() const { return specs_; }
  // Tensor `index` of specs() with its values, in fresh CPU memory the caller owns.
  // OutOfRange for an index past the end; ResourceExhausted when memory runs out.
  absl::StatusOr<Tensor> MakeTensor(size_t index) const;

  int64_t parameters() const;            // elements of every tensor
  int64_t bytes() const;                 // bytes of every tensor's data
  int64_t largest_tensor_bytes() const;  // bytes of the largest tensor

 private:
  SyntheticStateDict() = default;
  std::vector<SafetensorsTensorSpec> specs_;
  std::vector<uint8_t> fills_;  // per tensor, how its values are made (synthetic.cc)
  uint64_t seed_ = 0;
};

// The whole of SyntheticStateDict::Create(config, dtype, seed) in memory, in order (for the
// demo's small checkpoints). InvalidArgument for a bad dtype; ResourceExhausted when memory
// runs out.
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> MakeSyntheticStateDict(
    const ArchConfig& config, DType dtype, uint64_t seed);

// The __metadata__ `sdrt make` writes: "format" = "pt", "sdrt.arch", "sdrt.scale",
// "sdrt.seed", "sdrt.config" (the sizes as JSON; the MoE and MLA ones for those archs).
std::map<std::string, std::string> SyntheticMetadata(const ArchConfig& config, double scale,
                                                     uint64_t seed);

// float32 -> IEEE float16 / bfloat16 bits, round to nearest even (NaN stays NaN).
uint16_t FloatToHalfBits(float value);
uint16_t FloatToBFloat16Bits(float value);

// Shared by synthetic.cc and synthetic_moe.cc; not for other callers.
namespace synthetic_internal {

// How a tensor is filled; kPositionIds is BERT's embeddings.position_ids (0, 1, ...).
enum class Init : uint8_t { kWeight, kNorm, kBias, kPositionIds };

// One parameter tensor to make, in the state dict's dtype unless `float32`.
struct Spec {
  std::string name;
  IntVector shape;
  Init init;
  bool float32 = false;
};

// The MoE architectures' names (in help order), and ScaledArch for them: *found is false
// (and the result to be ignored) for a name that is not one of them; InvalidArgument for
// more than 1,000,000 tensors. The caller has checked `scale`.
std::vector<std::string> MoeArchNames();
absl::StatusOr<ArchConfig> ScaledMoeArch(absl::string_view arch, double scale, bool* found);

// The tensors of a config of an MoE family, in the Hugging Face state dict's order.
std::vector<Spec> MoeSpecs(const ArchConfig& config);

// The MoE and MLA sizes of `config` (its fields that are not 0), for "sdrt.config" and
// `sdrt make --json`, in a fixed order.
std::vector<std::pair<std::string, int64_t>> MoeSizes(const ArchConfig& config);

// `value` * `scale` rounded to the nearest integer, at least 1.
int64_t Scaled(int64_t value, double scale);

}  // namespace synthetic_internal

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_SYNTHETIC_H_
