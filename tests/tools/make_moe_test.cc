// `sdrt make`'s Mixture-of-Experts architectures (tools/sdrt/internal/synthetic_moe.cc) and
// --header-only: the names, shapes and counts at a small scale, the full-scale parameter
// counts from the architectures' formulas, and a header-only description that inspect lists
// and every loader refuses (core/io/safetensors.h, Options::accept_header_only).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/tools/command_util.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using cli::ArchConfig;
using cli::ScaledArch;
using cli::SyntheticStateDict;
using ::testing::HasSubstr;
using ::testing::Not;

test::CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(std::string(SDRT_BINARY) + " " + args);
}

// ScaledArch's rule for one size: value x scale rounded, at least 1.
int64_t R(int64_t value, double scale) {
  return std::max<int64_t>(1, std::llround(static_cast<double>(value) * scale));
}

// name -> (dtype, shape) of a synthetic state dict.
struct Listing {
  std::map<std::string, std::pair<DType, std::vector<int64_t>>> tensors;
  size_t count = 0;
  bool Has(const std::string& name) const { return tensors.count(name) != 0; }
  std::vector<int64_t> Shape(const std::string& name) const {
    auto it = tensors.find(name);
    return it == tensors.end() ? std::vector<int64_t>{-1} : it->second.second;
  }
  DType Dtype(const std::string& name) const { return tensors.at(name).first; }
};

Listing List(const ArchConfig& config) {
  absl::StatusOr<SyntheticStateDict> sd = SyntheticStateDict::Create(config, DType::kBFloat16, 0);
  EXPECT_TRUE(sd.ok()) << sd.status();
  Listing out;
  if (!sd.ok()) return out;
  for (const SafetensorsTensorSpec& s : sd->specs()) {
    out.tensors[s.name] = {s.dtype, std::vector<int64_t>(s.shape.begin(), s.shape.end())};
  }
  out.count = sd->specs().size();
  EXPECT_EQ(out.tensors.size(), out.count) << "duplicate names";
  return out;
}

using V = std::vector<int64_t>;

// An MLP of `width` under prefix `p` (a dense layer's mlp., an expert, the shared expert).
void ExpectMlp(const Listing& l, const std::string& p, int64_t width, int64_t hidden) {
  EXPECT_EQ(l.Shape(p + "gate_proj.weight"), (V{width, hidden})) << p;
  EXPECT_EQ(l.Shape(p + "up_proj.weight"), (V{width, hidden})) << p;
  EXPECT_EQ(l.Shape(p + "down_proj.weight"), (V{hidden, width})) << p;
}

constexpr double kSmall = 0.05;

TEST(MakeMoe, Qwen3MoeAtASmallScale) {
  absl::StatusOr<ArchConfig> c = ScaledArch("qwen3-moe", kSmall);
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t h = R(4096, kSmall), hd = R(128, kSmall), e = R(128, kSmall), w = R(1536, kSmall);
  const int64_t layers = R(94, kSmall);
  EXPECT_EQ(c->hidden, h);
  EXPECT_EQ(c->layers, layers);
  EXPECT_EQ(c->experts, e);
  EXPECT_GE(e, 4);
  EXPECT_EQ(c->dense_layers, 0);
  const Listing l = List(*c);
  // Per layer: q/k/v/o, q_norm, k_norm, 2 norms, the router, 3 per expert.
  EXPECT_EQ(l.count, static_cast<size_t>(3 + layers * (6 + 2 + 1 + 3 * e)));
  EXPECT_EQ(l.Shape("model.embed_tokens.weight"), (V{R(151936, kSmall), h}));
  EXPECT_EQ(l.Shape("lm_head.weight"), (V{R(151936, kSmall), h}));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    EXPECT_EQ(l.Shape(p + "self_attn.q_proj.weight"), (V{64 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.k_proj.weight"), (V{4 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.v_proj.weight"), (V{4 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.o_proj.weight"), (V{h, 64 * hd}));
    EXPECT_FALSE(l.Has(p + "self_attn.q_proj.bias"));
    EXPECT_EQ(l.Shape(p + "self_attn.q_norm.weight"), (V{hd}));
    EXPECT_EQ(l.Shape(p + "self_attn.k_norm.weight"), (V{hd}));
    EXPECT_EQ(l.Shape(p + "mlp.gate.weight"), (V{e, h}));
    EXPECT_FALSE(l.Has(p + "mlp.gate.e_score_correction_bias"));
    EXPECT_FALSE(l.Has(p + "mlp.gate_proj.weight"));
    EXPECT_FALSE(l.Has(p + "mlp.shared_experts.gate_proj.weight"));
    for (int64_t x = 0; x < e; ++x) ExpectMlp(l, absl::StrCat(p, "mlp.experts.", x, "."), w, h);
    EXPECT_FALSE(l.Has(absl::StrCat(p, "mlp.experts.", e, ".up_proj.weight")));
    EXPECT_EQ(l.Shape(p + "input_layernorm.weight"), (V{h}));
    EXPECT_EQ(l.Shape(p + "post_attention_layernorm.weight"), (V{h}));
  }
}

// DeepSeek-V3 and Kimi-K2: MLA, leading dense layers, experts, a shared one, router bias.
void ExpectDeepseekFamily(const std::string& arch, int64_t heads, int64_t experts_base,
                          int64_t vocab, int64_t dense_expected, int64_t layers_expected) {
  SCOPED_TRACE(arch);
  absl::StatusOr<ArchConfig> c = ScaledArch(arch, kSmall);
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t h = R(7168, kSmall), e = R(experts_base, kSmall), w = R(2048, kSmall);
  const int64_t ql = R(1536, kSmall), kl = R(512, kSmall), nope = R(128, kSmall),
                rope = R(64, kSmall), v = R(128, kSmall);
  EXPECT_EQ(c->layers, layers_expected);
  EXPECT_EQ(c->dense_layers, dense_expected);
  EXPECT_EQ(c->experts, e);
  EXPECT_GE(e, 4);
  EXPECT_EQ(c->heads, heads);
  const Listing l = List(*c);
  const int64_t moe_layers = layers_expected - dense_expected;
  EXPECT_GE(moe_layers, 1);
  EXPECT_EQ(l.count, static_cast<size_t>(3 + dense_expected * (7 + 2 + 3) +
                                         moe_layers * (7 + 2 + 2 + 3 * e + 3)));
  EXPECT_EQ(l.Shape("model.embed_tokens.weight"), (V{R(vocab, kSmall), h}));
  for (int64_t i = 0; i < layers_expected; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    EXPECT_EQ(l.Shape(p + "self_attn.q_a_proj.weight"), (V{ql, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.q_a_layernorm.weight"), (V{ql}));
    EXPECT_EQ(l.Shape(p + "self_attn.q_b_proj.weight"), (V{heads * (nope + rope), ql}));
    EXPECT_EQ(l.Shape(p + "self_attn.kv_a_proj_with_mqa.weight"), (V{kl + rope, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.kv_a_layernorm.weight"), (V{kl}));
    EXPECT_EQ(l.Shape(p + "self_attn.kv_b_proj.weight"), (V{heads * (nope + v), kl}));
    EXPECT_EQ(l.Shape(p + "self_attn.o_proj.weight"), (V{h, heads * v}));
    EXPECT_FALSE(l.Has(p + "self_attn.q_proj.weight"));
    if (i < dense_expected) {
      ExpectMlp(l, p + "mlp.", R(18432, kSmall), h);
      EXPECT_FALSE(l.Has(p + "mlp.gate.weight"));
      EXPECT_FALSE(l.Has(p + "mlp.experts.0.gate_proj.weight"));
      continue;
    }
    EXPECT_FALSE(l.Has(p + "mlp.gate_proj.weight"));
    EXPECT_EQ(l.Shape(p + "mlp.gate.weight"), (V{e, h}));
    EXPECT_EQ(l.Shape(p + "mlp.gate.e_score_correction_bias"), (V{e}));
    EXPECT_EQ(l.Dtype(p + "mlp.gate.e_score_correction_bias"), DType::kFloat32);
    EXPECT_EQ(l.Dtype(p + "mlp.gate.weight"), DType::kBFloat16);
    for (int64_t x = 0; x < e; ++x) ExpectMlp(l, absl::StrCat(p, "mlp.experts.", x, "."), w, h);
    EXPECT_FALSE(l.Has(absl::StrCat(p, "mlp.experts.", e, ".gate_proj.weight")));
    ExpectMlp(l, p + "mlp.shared_experts.", w, h);
  }
  EXPECT_FALSE(l.Has(absl::StrCat("model.layers.", layers_expected, ".input_layernorm.weight")));
}

TEST(MakeMoe, DeepseekV3AtASmallScale) {
  // 61 layers x 0.05 = 3, of which the 3 dense ones keep 2 (one layer stays MoE).
  ExpectDeepseekFamily("deepseek-v3", 128, 256, 129280, 2, 3);
}

TEST(MakeMoe, KimiK2AtASmallScale) { ExpectDeepseekFamily("kimi-k2", 64, 384, 163840, 1, 3); }

TEST(MakeMoe, GlmMoeAtASmallScale) {
  absl::StatusOr<ArchConfig> c = ScaledArch("glm-moe", kSmall);
  ASSERT_TRUE(c.ok()) << c.status();
  const int64_t h = R(5120, kSmall), hd = R(128, kSmall), e = R(160, kSmall), w = R(1536, kSmall);
  const int64_t layers = R(92, kSmall);
  ASSERT_EQ(layers, 5);
  EXPECT_EQ(c->dense_layers, 3);
  EXPECT_EQ(c->experts, e);
  const Listing l = List(*c);
  EXPECT_EQ(l.count, static_cast<size_t>(3 + 3 * (9 + 2 + 3) + 2 * (9 + 2 + 2 + 3 * e + 3)));
  EXPECT_EQ(l.Shape("lm_head.weight"), (V{R(151552, kSmall), h}));
  for (int64_t i = 0; i < layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    EXPECT_EQ(l.Shape(p + "self_attn.q_proj.weight"), (V{96 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.q_proj.bias"), (V{96 * hd}));
    EXPECT_EQ(l.Shape(p + "self_attn.k_proj.weight"), (V{8 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.k_proj.bias"), (V{8 * hd}));
    EXPECT_EQ(l.Shape(p + "self_attn.v_proj.weight"), (V{8 * hd, h}));
    EXPECT_EQ(l.Shape(p + "self_attn.v_proj.bias"), (V{8 * hd}));
    EXPECT_EQ(l.Shape(p + "self_attn.o_proj.weight"), (V{h, 96 * hd}));
    EXPECT_FALSE(l.Has(p + "self_attn.o_proj.bias"));
    EXPECT_EQ(l.Shape(p + "self_attn.q_norm.weight"), (V{hd}));
    if (i < 3) {
      ExpectMlp(l, p + "mlp.", R(12288, kSmall), h);
      EXPECT_FALSE(l.Has(p + "mlp.gate.weight"));
      continue;
    }
    EXPECT_EQ(l.Shape(p + "mlp.gate.weight"), (V{e, h}));
    EXPECT_EQ(l.Shape(p + "mlp.gate.e_score_correction_bias"), (V{e}));
    for (int64_t x = 0; x < e; ++x) ExpectMlp(l, absl::StrCat(p, "mlp.experts.", x, "."), w, h);
    ExpectMlp(l, p + "mlp.shared_experts.", w, h);
  }
}

// Parameters of one GQA attention (q/k/v/o, optional q/k/v biases, q_norm and k_norm).
int64_t Gqa(int64_t h, int64_t heads, int64_t kv_heads, int64_t hd, bool bias) {
  const int64_t q = heads * hd, kv = kv_heads * hd;
  return q * h + 2 * kv * h + h * q + (bias ? q + 2 * kv : 0) + 2 * hd;
}

// Parameters of one MLA attention (DeepSeek-V3's sizes but the head count).
int64_t Mla(int64_t h, int64_t heads) {
  const int64_t ql = 1536, kl = 512, nope = 128, rope = 64, v = 128;
  return ql * h + ql + heads * (nope + rope) * ql + (kl + rope) * h + kl + heads * (nope + v) * kl +
         h * heads * v;
}

// embed + lm_head + final norm + the layers: each attention + 2 norms + its MLP (a dense
// one of 3 x inter x h, or experts (3 x width x h each), a shared one, the router and its
// bias).
int64_t Model(int64_t vocab, int64_t h, int64_t layers, int64_t dense, int64_t attention,
              int64_t inter, int64_t experts, int64_t width, int64_t shared, bool router_bias) {
  const int64_t moe =
      experts * 3 * width * h + shared * 3 * width * h + experts * h + (router_bias ? experts : 0);
  return 2 * vocab * h + h + layers * (attention + 2 * h) + dense * 3 * inter * h +
         (layers - dense) * moe;
}

TEST(MakeMoe, FullScaleParameterCounts) {
  struct Case {
    const char* arch;
    int64_t formula;
    int64_t expected;  // the formula's value, worked out by hand
  };
  const Case cases[] = {
      {"qwen3-moe",
       Model(151936, 4096, 94, 0, Gqa(4096, 64, 4, 128, false), 0, 128, 1536, 0, false),
       235'093'634'560},
      {"deepseek-v3", Model(129280, 7168, 61, 3, Mla(7168, 128), 18432, 256, 2048, 1, true),
       671'026'419'200},
      {"kimi-k2", Model(163840, 7168, 61, 1, Mla(7168, 64), 18432, 384, 2048, 1, true),
       1'026'408'232'448},
      {"glm-moe",
       Model(151552, 5120, 92, 3, Gqa(5120, 96, 8, 128, true), 12288, 160, 1536, 1, true),
       352'797'829'024},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arch);
    EXPECT_EQ(c.formula, c.expected);
    absl::StatusOr<ArchConfig> config = ScaledArch(c.arch, 1.0);
    ASSERT_TRUE(config.ok()) << config.status();
    absl::StatusOr<SyntheticStateDict> sd =
        SyntheticStateDict::Create(*config, DType::kBFloat16, 0);
    ASSERT_TRUE(sd.ok()) << sd.status();
    EXPECT_EQ(sd->parameters(), c.expected);
  }
  // The published sizes: 235B, 671B (with its 14B MTP layer left out: 656B+), 1.03T, 355B
  // (with its MTP layer).
  EXPECT_NEAR(cases[0].expected / 1e9, 235, 1);
  EXPECT_NEAR(cases[1].expected / 1e9, 671, 1);
  EXPECT_NEAR(cases[2].expected / 1e12, 1.03, 0.01);
  EXPECT_NEAR(cases[3].expected / 1e9, 355, 3);
}

TEST(MakeMoe, TooManyTensorsAreRefused) {
  // kimi-k2 at 16: 976 layers of 6144 experts, some 18 million tensors.
  absl::StatusOr<ArchConfig> c = ScaledArch("kimi-k2", 16);
  EXPECT_TRUE(absl::IsInvalidArgument(c.status())) << c.status();
  EXPECT_THAT(c.status().message(), HasSubstr("tensors"));
}

// A --scale that is not a number in (0, 16] is exit 2 in make and simulate; an empty one is
// not read as 0.
TEST(MakeMoeCli, ScalesOutOfRangeOrNotNumbersAreRefused) {
  const std::string out = test::FreshDir("make_moe_scale") + "/m.safetensors";
  for (const char* scale : {"''", "abc", "0", "-1", "17", "nan"}) {
    SCOPED_TRACE(scale);
    test::CommandResult r = Sdrt(absl::StrCat("make --arch qwen3-moe --header-only --scale ",
                                              scale, " ", out));
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_THAT(r.err, HasSubstr("--scale")) << r.err;
    EXPECT_FALSE(fs::exists(out));
    r = Sdrt(absl::StrCat("simulate --model qwen3-moe --scale ", scale,
                          " --from fsdp:dp=2 --to vllm:tp=2 --cluster nodes=1,gpus=2"));
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_THAT(r.err, HasSubstr("--scale")) << r.err;
  }
}

int64_t FileSize(const std::string& path) { return static_cast<int64_t>(fs::file_size(path)); }

// The full Kimi-K2 as a header: a few MB, listed by inspect, refused by load and shard.
TEST(MakeMoeCli, KimiK2HeaderOnly) {
  const std::string root = test::FreshDir("make_moe_kimi");
  const std::string out = root + "/kimi.safetensors";
  test::CommandResult r = Sdrt("make --arch kimi-k2 --header-only --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json made = nlohmann::json::parse(r.out);
  EXPECT_EQ(made["header_only"], true);
  EXPECT_EQ(made["file_size"].get<int64_t>(), FileSize(out));
  EXPECT_EQ(made["parameters"].get<int64_t>(), 1'026'408'232'448);
  EXPECT_EQ(made["experts"], 384);
  EXPECT_EQ(made["dense_layers"], 1);
  EXPECT_GT(FileSize(out), 1'000'000);
  EXPECT_LT(FileSize(out), 20'000'000);

  // The library: refused by default, opened when asked, its tensors never handed out.
  absl::StatusOr<SafetensorsFile> refused = SafetensorsFile::Open(out);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("sdrt make --header-only"));
  SafetensorsFile::Options options;
  options.accept_header_only = true;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out, options);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->header_only());
  EXPECT_EQ(file->file_size(), file->data_offset());
  EXPECT_EQ(file->entries().size(), made["tensors"].get<size_t>());
  EXPECT_EQ(file->metadata().at("sdrt.header_only"), "true");
  const SafetensorsEntry* head = file->Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->data_end - head->data_begin, int64_t{163840} * 7168 * 2);
  absl::StatusOr<Tensor> t = file->Get("model.norm.weight");
  EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << t.status();
  EXPECT_THAT(t.status().message(), HasSubstr("no tensor bytes"));

  r = Sdrt("inspect " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("header only"));
  EXPECT_THAT(r.out, HasSubstr("model.layers.60.mlp.experts.383.down_proj.weight"));
  r = Sdrt("inspect --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json listed = nlohmann::json::parse(r.out);
  EXPECT_EQ(listed["header_only"], true);
  EXPECT_EQ(listed["file_size"].get<int64_t>(), FileSize(out));
  EXPECT_EQ(listed["parameters"], made["parameters"]);
  EXPECT_EQ(listed["bytes"], made["bytes"]);

  for (const std::string& command :
       {"load " + out + " --mesh 1 --plan fsdp",
        "shard " + out + " " + root + "/sharded --mesh 2 --plan fsdp"}) {
    SCOPED_TRACE(command);
    r = Sdrt(command);
    EXPECT_EQ(r.exit_code, 2) << r.all();
    EXPECT_THAT(r.err, HasSubstr("header-only description made by `sdrt make --header-only`"));
    EXPECT_THAT(r.err, HasSubstr("no tensor bytes"));
  }
}

// The header-only file is the real file's header (with the marker), nothing after it; it
// is replaced like a checkpoint (with --overwrite).
TEST(MakeMoeCli, HeaderOnlyIsTheRealLayout) {
  const std::string root = test::FreshDir("make_moe_layout");
  const std::string real = root + "/real.safetensors";
  const std::string header = root + "/header.safetensors";
  const std::string args = "make --arch glm-moe --scale 0.05 --seed 3 ";
  ASSERT_EQ(Sdrt(args + real).exit_code, 0);
  test::CommandResult r = Sdrt(args + "--header-only " + header);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("header only"));
  absl::StatusOr<SafetensorsFile> a = SafetensorsFile::Open(real);
  SafetensorsFile::Options options;
  options.accept_header_only = true;
  absl::StatusOr<SafetensorsFile> b = SafetensorsFile::Open(header, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(a->header_only());
  ASSERT_EQ(a->entries().size(), b->entries().size());
  for (size_t i = 0; i < a->entries().size(); ++i) {
    const SafetensorsEntry& x = a->entries()[i];
    const SafetensorsEntry& y = b->entries()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    EXPECT_EQ(x.data_begin, y.data_begin);
    EXPECT_EQ(x.data_end, y.data_end);
  }
  std::map<std::string, std::string> metadata = b->metadata();
  EXPECT_EQ(metadata.erase("sdrt.header_only"), 1u);
  EXPECT_EQ(metadata, a->metadata());
  EXPECT_EQ(FileSize(header), b->data_offset());

  r = Sdrt(args + header);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--overwrite"));
  r = Sdrt(args + "--overwrite " + header);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(FileSize(header), FileSize(real));
}

void CopyPrefix(const std::string& from, const std::string& to, int64_t bytes,
                const std::string& extra = "") {
  std::string text = test::ReadFileText(from);
  text.resize(static_cast<size_t>(bytes));
  std::ofstream(to, std::ios::binary) << text << extra;
}

// The marker excuses an empty data region only: truncated files are refused as truncated,
// with or without accept_header_only, and an image in memory is never accepted.
TEST(MakeMoeCli, TruncatedFilesStayRefused) {
  const std::string root = test::FreshDir("make_moe_truncated");
  const std::string real = root + "/real.safetensors";
  const std::string header = root + "/header.safetensors";
  ASSERT_EQ(Sdrt("make --arch qwen3-moe --scale 0.05 " + real).exit_code, 0);
  ASSERT_EQ(Sdrt("make --arch qwen3-moe --scale 0.05 --header-only " + header).exit_code, 0);
  absl::StatusOr<SafetensorsFile> full = SafetensorsFile::Open(real);
  ASSERT_TRUE(full.ok()) << full.status();
  SafetensorsFile::Options accept;
  accept.accept_header_only = true;

  // The real file cut at its data region (no marker), and cut 1 byte short.
  const std::string cut = root + "/cut.safetensors";
  for (int64_t size : {full->data_offset(), full->file_size() - 1}) {
    SCOPED_TRACE(size);
    CopyPrefix(real, cut, size);
    for (const SafetensorsFile::Options& options : {SafetensorsFile::Options(), accept}) {
      absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(cut, options);
      EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
      EXPECT_THAT(f.status().message(), Not(HasSubstr("header-only")));
    }
    const test::CommandResult r = Sdrt("inspect " + cut);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.out, Not(HasSubstr("header only")));
  }
  // The header-only file with some data bytes after it: refused as truncated.
  CopyPrefix(header, cut, FileSize(header), std::string(64, '\0'));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(cut, accept);
  EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
  EXPECT_THAT(f.status().message(), Not(HasSubstr("header-only")));
  // FromBuffer names what it is and refuses it.
  const std::string bytes = test::ReadFileText(header);
  auto storage = Storage::AllocateCpu(static_cast<int64_t>(bytes.size()));
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::memcpy((*storage)->data(), bytes.data(), bytes.size());
  f = SafetensorsFile::FromBuffer(*storage);
  EXPECT_TRUE(absl::IsInvalidArgument(f.status())) << f.status();
  EXPECT_THAT(f.status().message(), HasSubstr("header-only"));
}

// A small MoE checkpoint is real data every loader takes: dense layers, MoE layers, several
// experts, the float32 router biases.
TEST(MakeMoeCli, SmallScaleLoads) {
  const std::string root = test::FreshDir("make_moe_load");
  const std::string out = root + "/ds.safetensors";
  test::CommandResult r = Sdrt("make --arch deepseek-v3 --scale 0.05 --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json made = nlohmann::json::parse(r.out);
  EXPECT_EQ(made["header_only"], false);
  EXPECT_EQ(made["file_size"].get<int64_t>(), FileSize(out));
  EXPECT_LT(FileSize(out), 25'000'000);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(out);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<Tensor> bias = file->Get("model.layers.2.mlp.gate.e_score_correction_bias");
  ASSERT_TRUE(bias.ok()) << bias.status();
  EXPECT_EQ(bias->dtype(), DType::kFloat32);
  r = Sdrt("load " + out + " --mesh 1 --plan fsdp");
  EXPECT_EQ(r.exit_code, 0) << r.all();
}

}  // namespace
}  // namespace sdrt
