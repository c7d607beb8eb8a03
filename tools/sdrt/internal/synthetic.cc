#include "sdrt/tools/sdrt/internal/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt::cli {
namespace {

using synthetic_internal::Init;
using synthetic_internal::Scaled;
using synthetic_internal::Spec;

struct BaseArch {
  const char* name;
  ArchFamily family;
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab, max_positions, type_vocab;
};

constexpr BaseArch kArchs[] = {
    {"tiny-llama", ArchFamily::kLlama, 64, 172, 2, 4, 2, 256, 0, 0},
    {"llama-8b", ArchFamily::kLlama, 4096, 14336, 32, 32, 8, 128256, 0, 0},
    {"llama-70b", ArchFamily::kLlama, 8192, 28672, 80, 64, 8, 128256, 0, 0},
    {"bert-base", ArchFamily::kBert, 768, 3072, 12, 12, 12, 30522, 512, 2},
    {"gpt2", ArchFamily::kGpt2, 768, 3072, 12, 12, 12, 50257, 1024, 0},
};

int64_t Numel(IntSpan shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::vector<Spec> Specs(const ArchConfig& c) {
  std::vector<Spec> out;
  auto weight = [&](std::string name, int64_t rows, int64_t cols) {
    out.push_back({std::move(name), {rows, cols}, Init::kWeight});
  };
  auto vec = [&](std::string name, int64_t n, Init init) {
    out.push_back({std::move(name), {n}, init});
  };
  const int64_t h = c.hidden;
  switch (c.family) {
    case ArchFamily::kLlama: {
      const int64_t kv = c.kv_heads * c.head_dim;
      weight("model.embed_tokens.weight", c.vocab, h);
      for (int64_t i = 0; i < c.layers; ++i) {
        const std::string p = absl::StrCat("model.layers.", i, ".");
        weight(p + "self_attn.q_proj.weight", h, h);
        weight(p + "self_attn.k_proj.weight", kv, h);
        weight(p + "self_attn.v_proj.weight", kv, h);
        weight(p + "self_attn.o_proj.weight", h, h);
        weight(p + "mlp.gate_proj.weight", c.intermediate, h);
        weight(p + "mlp.up_proj.weight", c.intermediate, h);
        weight(p + "mlp.down_proj.weight", h, c.intermediate);
        vec(p + "input_layernorm.weight", h, Init::kNorm);
        vec(p + "post_attention_layernorm.weight", h, Init::kNorm);
      }
      vec("model.norm.weight", h, Init::kNorm);
      weight("lm_head.weight", c.vocab, h);
      break;
    }
    case ArchFamily::kBert: {
      weight("embeddings.word_embeddings.weight", c.vocab, h);
      weight("embeddings.position_embeddings.weight", c.max_positions, h);
      weight("embeddings.token_type_embeddings.weight", c.type_vocab, h);
      vec("embeddings.LayerNorm.weight", h, Init::kNorm);
      vec("embeddings.LayerNorm.bias", h, Init::kBias);
      for (int64_t i = 0; i < c.layers; ++i) {
        const std::string p = absl::StrCat("encoder.layer.", i, ".");
        for (const char* qkv : {"query", "key", "value"}) {
          weight(absl::StrCat(p, "attention.self.", qkv, ".weight"), h, h);
          vec(absl::StrCat(p, "attention.self.", qkv, ".bias"), h, Init::kBias);
        }
        weight(p + "attention.output.dense.weight", h, h);
        vec(p + "attention.output.dense.bias", h, Init::kBias);
        vec(p + "attention.output.LayerNorm.weight", h, Init::kNorm);
        vec(p + "attention.output.LayerNorm.bias", h, Init::kBias);
        weight(p + "intermediate.dense.weight", c.intermediate, h);
        vec(p + "intermediate.dense.bias", c.intermediate, Init::kBias);
        weight(p + "output.dense.weight", h, c.intermediate);
        vec(p + "output.dense.bias", h, Init::kBias);
        vec(p + "output.LayerNorm.weight", h, Init::kNorm);
        vec(p + "output.LayerNorm.bias", h, Init::kBias);
      }
      weight("pooler.dense.weight", h, h);
      vec("pooler.dense.bias", h, Init::kBias);
      break;
    }
    case ArchFamily::kGpt2: {
      // Conv1D weights are [in, out]; fan_in is rows.
      weight("wte.weight", c.vocab, h);
      weight("wpe.weight", c.max_positions, h);
      for (int64_t i = 0; i < c.layers; ++i) {
        const std::string p = absl::StrCat("h.", i, ".");
        vec(p + "ln_1.weight", h, Init::kNorm);
        vec(p + "ln_1.bias", h, Init::kBias);
        weight(p + "attn.c_attn.weight", h, 3 * h);
        vec(p + "attn.c_attn.bias", 3 * h, Init::kBias);
        weight(p + "attn.c_proj.weight", h, h);
        vec(p + "attn.c_proj.bias", h, Init::kBias);
        vec(p + "ln_2.weight", h, Init::kNorm);
        vec(p + "ln_2.bias", h, Init::kBias);
        weight(p + "mlp.c_fc.weight", h, c.intermediate);
        vec(p + "mlp.c_fc.bias", c.intermediate, Init::kBias);
        weight(p + "mlp.c_proj.weight", c.intermediate, h);
        vec(p + "mlp.c_proj.bias", h, Init::kBias);
      }
      vec("ln_f.weight", h, Init::kNorm);
      vec("ln_f.bias", h, Init::kBias);
      break;
    }
    case ArchFamily::kQwen3Moe:
    case ArchFamily::kDeepseekV3:
    case ArchFamily::kGlmMoe:
      return synthetic_internal::MoeSpecs(c);
  }
  return out;
}

}  // namespace

namespace synthetic_internal {

int64_t Scaled(int64_t value, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(value) * scale));
}

}  // namespace synthetic_internal

uint16_t FloatToBFloat16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

uint16_t FloatToHalfBits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t raw_exp = static_cast<int32_t>((x >> 23) & 0xffu);
  uint32_t mant = x & 0x7fffffu;
  if (raw_exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u : 0u));
  const int32_t exp = raw_exp - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {  // subnormal half (or zero)
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // a carry rounds up the exponent
  return static_cast<uint16_t>(sign | half);
}

std::vector<std::string> ArchNames() {
  std::vector<std::string> out;
  for (const BaseArch& a : kArchs) out.emplace_back(a.name);
  for (std::string& name : synthetic_internal::MoeArchNames()) out.push_back(std::move(name));
  return out;
}

absl::StatusOr<ArchConfig> ScaledArch(absl::string_view arch, double scale) {
  if (!(scale > 0.0) || scale > 16.0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--scale must be in (0, 16], got %.17g", scale));
  }
  for (const BaseArch& a : kArchs) {
    if (arch != a.name) continue;
    ArchConfig c;
    c.name = a.name;
    c.family = a.family;
    c.heads = a.heads;
    c.kv_heads = a.kv_heads;
    c.head_dim = Scaled(a.hidden / a.heads, scale);
    c.hidden = c.heads * c.head_dim;
    c.intermediate = Scaled(a.intermediate, scale);
    c.layers = Scaled(a.layers, scale);
    c.vocab = Scaled(a.vocab, scale);
    c.max_positions = a.max_positions;
    c.type_vocab = a.type_vocab;
    return c;
  }
  bool found = false;
  absl::StatusOr<ArchConfig> moe = synthetic_internal::ScaledMoeArch(arch, scale, &found);
  if (found) return moe;
  return absl::InvalidArgumentError(absl::StrCat("unknown arch \"", arch, "\": expected one of ",
                                                 absl::StrJoin(ArchNames(), ", ")));
}

absl::StatusOr<SyntheticStateDict> SyntheticStateDict::Create(const ArchConfig& config,
                                                              DType dtype, uint64_t seed) {
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic checkpoints are float32, float16 or bfloat16, not ", DTypeName(dtype)));
  }
  SyntheticStateDict out;
  out.seed_ = seed;
  if (config.family == ArchFamily::kBert) {
    out.specs_.push_back({"embeddings.position_ids", DType::kInt64, {1, config.max_positions}});
    out.fills_.push_back(static_cast<uint8_t>(Init::kPositionIds));
  }
  for (Spec& spec : Specs(config)) {
    out.specs_.push_back(
        {std::move(spec.name), spec.float32 ? DType::kFloat32 : dtype, std::move(spec.shape)});
    out.fills_.push_back(static_cast<uint8_t>(spec.init));
  }
  return out;
}

absl::StatusOr<Tensor> SyntheticStateDict::MakeTensor(size_t index) const {
  if (index >= specs_.size()) {
    return absl::OutOfRangeError(
        absl::StrCat("tensor ", index, " of a synthetic state dict of ", specs_.size()));
  }
  const SafetensorsTensorSpec& spec = specs_[index];
  const auto init = static_cast<Init>(fills_[index]);
  SDRT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(spec.shape, spec.dtype));
  const int64_t n = t.numel();
  if (init == Init::kPositionIds) {
    for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = i;
    return t;
  }
  const uint64_t key = XXH64(spec.name.data(), spec.name.size(), seed_);
  const float scale = init == Init::kWeight ? 1.0f / std::sqrt(static_cast<float>(spec.shape[1]))
                      : init == Init::kNorm ? 0.1f
                                            : 0.02f;
  const float offset = init == Init::kNorm ? 1.0f : 0.0f;
  char* data = static_cast<char*>(t.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    // 24 random bits -> [-1, 1), exact in float32.
    const uint64_t bits = SplitMix64(key + static_cast<uint64_t>(i)) >> 40;
    const float u = static_cast<float>(bits) * (1.0f / 8388608.0f) - 1.0f;
    const float v = offset + scale * u;
    if (spec.dtype == DType::kFloat32) {
      std::memcpy(data + 4 * i, &v, 4);
    } else {
      const uint16_t h =
          spec.dtype == DType::kFloat16 ? FloatToHalfBits(v) : FloatToBFloat16Bits(v);
      std::memcpy(data + 2 * i, &h, 2);
    }
  }
  return t;
}

int64_t SyntheticStateDict::parameters() const {
  int64_t n = 0;
  for (const SafetensorsTensorSpec& s : specs_) n += Numel(s.shape);
  return n;
}

int64_t SyntheticStateDict::bytes() const {
  int64_t n = 0;
  // Whole-byte dtypes only (Create accepts float32, float16 and bfloat16; int64 ids).
  for (const SafetensorsTensorSpec& s : specs_) n += Numel(s.shape) * ElementBits(s.dtype) / 8;
  return n;
}

int64_t SyntheticStateDict::largest_tensor_bytes() const {
  int64_t n = 0;
  for (const SafetensorsTensorSpec& s : specs_) {
    n = std::max(n, Numel(s.shape) * ElementBits(s.dtype) / 8);
  }
  return n;
}

absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> MakeSyntheticStateDict(
    const ArchConfig& config, DType dtype, uint64_t seed) {
  SDRT_ASSIGN_OR_RETURN(const SyntheticStateDict synthetic,
                        SyntheticStateDict::Create(config, dtype, seed));
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(synthetic.specs().size());
  for (size_t i = 0; i < synthetic.specs().size(); ++i) {
    SDRT_ASSIGN_OR_RETURN(Tensor t, synthetic.MakeTensor(i));
    out.emplace_back(synthetic.specs()[i].name, std::move(t));
  }
  return out;
}

std::map<std::string, std::string> SyntheticMetadata(const ArchConfig& config, double scale,
                                                     uint64_t seed) {
  nlohmann::ordered_json sizes = {
      {"hidden", config.hidden},     {"intermediate", config.intermediate},
      {"layers", config.layers},     {"heads", config.heads},
      {"kv_heads", config.kv_heads}, {"head_dim", config.head_dim},
      {"vocab", config.vocab}};
  if (config.max_positions > 0) sizes["max_positions"] = config.max_positions;
  for (const auto& [key, value] : synthetic_internal::MoeSizes(config)) sizes[key] = value;
  return {{"format", "pt"},
          {"sdrt.arch", config.name},
          {"sdrt.scale", absl::StrCat(scale)},
          {"sdrt.seed", absl::StrCat(seed)},
          {"sdrt.config", sizes.dump()}};
}

}  // namespace sdrt::cli
