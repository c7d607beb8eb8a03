// Parallel layouts (core/checkpoint/parallel_layout.h): the descriptions, each tensor's
// mesh and placements under Megatron's and vLLM's rules (pipeline stages, experts, tp),
// what a rank holds, and the refusals.
#include "sdrt/core/checkpoint/parallel_layout.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace sdrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string ParseError(const std::string& spec, int64_t world = 0) {
  absl::StatusOr<ParallelLayout> layout = ParallelLayout::Parse(spec, world);
  if (layout.ok()) return "ok: " + layout->ToString();
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(layout.status().message());
}

// A Llama-shaped MoE model of `layers` layers with `experts` experts each (names only
// matter; shapes small).
std::vector<SafetensorsTensorSpec> MoeModel(int layers, int experts) {
  std::vector<SafetensorsTensorSpec> t = {{"model.embed_tokens.weight", DType::kBFloat16, {32, 8}}};
  for (int l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t.push_back({p + "self_attn.q_proj.weight", DType::kBFloat16, {16, 8}});
    t.push_back({p + "self_attn.o_proj.weight", DType::kBFloat16, {8, 16}});
    t.push_back({p + "input_layernorm.weight", DType::kBFloat16, {8}});
    t.push_back({p + "mlp.gate.weight", DType::kBFloat16, {experts, 8}});
    for (int e = 0; e < experts; ++e) {
      const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
      t.push_back({x + "gate_proj.weight", DType::kBFloat16, {6, 8}});
      t.push_back({x + "down_proj.weight", DType::kBFloat16, {8, 6}});
    }
  }
  t.push_back({"model.norm.weight", DType::kBFloat16, {8}});
  t.push_back({"lm_head.weight", DType::kBFloat16, {32, 8}});
  return t;
}

// The home of tensor `name` of `tensors` under `layout`.
LaidOutTensor HomeOf(const ParallelLayout& layout,
                     const std::vector<SafetensorsTensorSpec>& tensors, const std::string& name) {
  const std::vector<LaidOutTensor> placed = *layout.Place(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].name == name) return placed[i];
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

std::vector<int64_t> RanksOf(const LaidOutTensor& t) { return t.mesh->ranks(); }

TEST(ParallelLayout, DescriptionsAndTheirDefaults) {
  // NeMo-RL's Qwen3-235B trainer on 128 GPUs: dp 4, one rank per ep rank in a stage.
  EXPECT_EQ(ParseError("megatron:tp=4,pp=8,ep=16", 128), "ok: megatron:tp=4,pp=8,dp=4,ep=16,etp=1");
  EXPECT_EQ(ParseError("vllm:tp=8,dp=16"), "ok: vllm:tp=8,pp=1,dp=16,ep=1");
  EXPECT_EQ(ParseError("vllm:tp=8", 128), "ok: vllm:tp=8,pp=1,dp=16,ep=1");
  EXPECT_EQ(ParseError("fsdp:dp=64"), "ok: fsdp:dp=64");
  EXPECT_EQ(ParseError("fsdp:", 6), "ok: fsdp:dp=6");
  EXPECT_EQ(ParseError("fsdp-tp:dp=8,tp=8", 64), "ok: fsdp-tp:dp=8,tp=8");
  // Without ep, Megatron's experts take tp's cut (expert_tensor_parallel_size = tp).
  const ParallelLayout dense = *ParallelLayout::Parse("megatron:tp=2,pp=2", 8);
  EXPECT_EQ(dense.dp(), 2);
  EXPECT_EQ(dense.etp(), 2);
  EXPECT_EQ(dense.world_size(), 8);
  EXPECT_TRUE(ParallelLayout::IsDescription("megatron:tp=2"));
  EXPECT_TRUE(ParallelLayout::IsDescription("fsdp-tp:"));
  EXPECT_FALSE(ParallelLayout::IsDescription("fsdp"));
  EXPECT_FALSE(ParallelLayout::IsDescription("plans/tp.json"));
  EXPECT_FALSE(ParallelLayout::IsDescription("C:/plan.json"));
}

TEST(ParallelLayout, BadDescriptionsAreRefusedNamingWhy) {
  EXPECT_THAT(ParseError("deepspeed:tp=2", 4), HasSubstr("expected megatron:, vllm:"));
  EXPECT_THAT(ParseError("fsdp:tp=2", 4), HasSubstr("fsdp takes dp"));
  EXPECT_THAT(ParseError("vllm:tp=2,etp=1", 4), HasSubstr("vllm takes tp,pp,dp,ep"));
  EXPECT_THAT(ParseError("megatron:tp=2,tp=2", 4), HasSubstr("tp is given twice"));
  EXPECT_THAT(ParseError("megatron:tp=0", 4), HasSubstr("tp must be a whole number"));
  EXPECT_THAT(ParseError("megatron:tp=+2", 4), HasSubstr("got \"+2\""));
  EXPECT_THAT(ParseError("megatron:tp=2x", 4), HasSubstr("got \"2x\""));
  EXPECT_THAT(ParseError("megatron:tp=99999999999999999999", 4), HasSubstr("whole number"));
  EXPECT_THAT(ParseError("megatron:tp=2,,pp=2", 4), HasSubstr("\"\": megatron takes"));
  EXPECT_THAT(ParseError("megatron:tp=2=abc", 4), HasSubstr("got \"2=abc\""));
  EXPECT_THAT(ParseError("megatron:tp=2,pp=2=", 4), HasSubstr("got \"2=\""));
  EXPECT_THAT(ParseError("megatron:tp=1048576,pp=2"), HasSubstr("more than 1048576 ranks"));
  EXPECT_THAT(ParseError("megatron:tp=1024,pp=1024,dp=2"), HasSubstr("more than 1048576"));
  EXPECT_THAT(ParseError("megatron:tp=2"), HasSubstr("dp is left out"));
  EXPECT_THAT(ParseError("megatron:tp=4", 6), HasSubstr("does not divide the world of 6"));
  EXPECT_THAT(ParseError("megatron:tp=2,dp=2", 8), HasSubstr("spans 4 ranks, the world has 8"));
  EXPECT_THAT(ParseError("megatron:tp=2,dp=2,ep=8"), HasSubstr("etp x ep = 1 x 8 does not"));
  EXPECT_THAT(ParseError("megatron:tp=2,dp=3,ep=4"), HasSubstr("does not divide dp x tp = 6"));
  EXPECT_THAT(ParseError("vllm:tp=2,dp=2,ep=2"), HasSubstr("ep must be 1 or 4"));
  // An ep that does not divide dp x tp either: vLLM's rule, which has no etp, is named.
  EXPECT_THAT(ParseError("vllm:tp=2,dp=2,ep=3"), HasSubstr("ep must be 1 or 4"));
  EXPECT_THAT(ParseError(std::string(300, 'x')), HasSubstr("longer than 256 bytes"));
  EXPECT_THAT(ParseError("fsdp:dp=2", -1), HasSubstr("a world of -1 ranks"));
}

TEST(ParallelLayout, MegatronStagesOwnContiguousLayersWithTheHeadOnTheLast) {
  const std::vector<SafetensorsTensorSpec> model = MoeModel(4, 2);
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:tp=2,pp=2", 4);
  // Stage 0 is ranks 0-1 (layers 0-1, the embedding), stage 1 ranks 2-3.
  const LaidOutTensor embed = HomeOf(layout, model, "model.embed_tokens.weight");
  EXPECT_THAT(RanksOf(embed), ElementsAre(0, 1));
  EXPECT_EQ(PlacementsToString(embed.placements), "[R, S(0)]");
  EXPECT_THAT(RanksOf(HomeOf(layout, model, "model.layers.1.self_attn.q_proj.weight")),
              ElementsAre(0, 1));
  const LaidOutTensor o = HomeOf(layout, model, "model.layers.2.self_attn.o_proj.weight");
  EXPECT_THAT(RanksOf(o), ElementsAre(2, 3));
  EXPECT_EQ(PlacementsToString(o.placements), "[R, S(1)]");
  EXPECT_EQ(o.mesh->shape(), (IntVector{1, 2}));
  EXPECT_THAT(o.mesh->dim_names(), ElementsAre("dp", "tp"));
  const LaidOutTensor norm = HomeOf(layout, model, "model.norm.weight");
  EXPECT_THAT(RanksOf(norm), ElementsAre(2, 3));
  EXPECT_EQ(PlacementsToString(norm.placements), "[R, R]");
  EXPECT_THAT(RanksOf(HomeOf(layout, model, "lm_head.weight")), ElementsAre(2, 3));
  // One mesh object per stage and kind, within one Place.
  const std::vector<LaidOutTensor> placed = *layout.Place(model);
  EXPECT_EQ(placed[placed.size() - 1].mesh, placed[placed.size() - 2].mesh);
  EXPECT_NE(placed[0].mesh, placed[placed.size() - 1].mesh);
  // Experts without ep are cut by tp like the dense layers (etp = tp).
  const LaidOutTensor down = HomeOf(layout, model, "model.layers.3.mlp.experts.1.down_proj.weight");
  EXPECT_THAT(RanksOf(down), ElementsAre(2, 3));
  EXPECT_EQ(PlacementsToString(down.placements), "[R, S(1)]");
}

TEST(ParallelLayout, NinetyFourLayersOverEightStagesAsFloorsCutThem) {
  const std::vector<SafetensorsTensorSpec> model = MoeModel(94, 1);
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:pp=8", 8);
  const std::vector<LaidOutTensor> placed = *layout.Place(model);
  for (int64_t l = 0; l < 94; ++l) {
    int64_t want = 0;  // the stage s with floor(s * 94 / 8) <= l
    for (int64_t s = 0; s < 8; ++s) {
      if (s * 94 / 8 <= l) want = s;
    }
    const std::string name = absl::StrCat("model.layers.", l, ".input_layernorm.weight");
    EXPECT_THAT(RanksOf(HomeOf(layout, model, name)), ElementsAre(want)) << name;
  }
}

TEST(ParallelLayout, ExpertsBelongToTheirEpRank) {
  // 8 layers of 128 experts, tp 4 x pp 8 x ep 16 on 128 ranks: layer 5 is stage 5 (ranks
  // 80-95); expert 37 is ep rank 37 / 8 = 4, its one rank 80 + 4.
  const std::vector<SafetensorsTensorSpec> model = MoeModel(8, 128);
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:tp=4,pp=8,ep=16", 128);
  const LaidOutTensor e = HomeOf(layout, model, "model.layers.5.mlp.experts.37.gate_proj.weight");
  EXPECT_THAT(RanksOf(e), ElementsAre(84));
  EXPECT_THAT(e.mesh->dim_names(), ElementsAre("edp", "etp"));
  const LaidOutTensor router = HomeOf(layout, model, "model.layers.5.mlp.gate.weight");
  EXPECT_EQ(router.mesh->num_ranks(), 16);
  EXPECT_EQ(router.mesh->ranks().front(), 80);
  // ep 2 over dp 2 x tp 2 with etp 1: expert k of 4 on ep rank k / 2, kept by edp 2 ranks:
  // local ranks (e * 2 + owner), i.e. ranks {0, 2} and {1, 3}.
  const std::vector<SafetensorsTensorSpec> small = MoeModel(1, 4);
  const ParallelLayout ep2 = *ParallelLayout::Parse("megatron:tp=2,dp=2,ep=2");
  EXPECT_THAT(RanksOf(HomeOf(ep2, small, "model.layers.0.mlp.experts.1.gate_proj.weight")),
              ElementsAre(0, 2));
  EXPECT_THAT(RanksOf(HomeOf(ep2, small, "model.layers.0.mlp.experts.3.gate_proj.weight")),
              ElementsAre(1, 3));
  // etp 2 with ep 2 on 4 ranks: each expert cut over 2 ranks.
  const ParallelLayout etp2 = *ParallelLayout::Parse("megatron:tp=2,dp=2,ep=2,etp=2");
  const LaidOutTensor cut = HomeOf(etp2, small, "model.layers.0.mlp.experts.2.gate_proj.weight");
  EXPECT_THAT(RanksOf(cut), ElementsAre(2, 3));
  EXPECT_EQ(PlacementsToString(cut.placements), "[R, S(0)]");
  // Experts that ep does not divide.
  const std::vector<SafetensorsTensorSpec> three = MoeModel(1, 3);
  EXPECT_THAT(std::string(ep2.Place(three).status().message()),
              HasSubstr("its layer has 3 experts, which ep=2 does not divide"));
}

TEST(ParallelLayout, StackedExpertsAreCutOnDimZeroOverEp) {
  const std::vector<SafetensorsTensorSpec> model = {
      {"model.layers.0.mlp.experts.gate_up_proj", DType::kFloat32, {8, 12, 4}},
      {"model.layers.0.mlp.shared_experts.up_proj.weight", DType::kFloat32, {6, 4}}};
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:tp=2,dp=2,ep=4");
  const LaidOutTensor stacked = HomeOf(layout, model, model[0].name);
  EXPECT_EQ(stacked.mesh->shape(), (IntVector{1, 4, 1}));
  EXPECT_EQ(PlacementsToString(stacked.placements), "[R, S(0), R]");
  // Shared experts are dense.
  const LaidOutTensor shared = HomeOf(layout, model, model[1].name);
  EXPECT_EQ(shared.mesh->shape(), (IntVector{2, 2}));
  EXPECT_EQ(PlacementsToString(shared.placements), "[R, S(0)]");
  const std::vector<SafetensorsTensorSpec> six = {
      {"layers.0.experts.w13", DType::kFloat32, {6, 4}}};
  EXPECT_THAT(std::string(layout.Place(six).status().message()),
              HasSubstr("stacked experts need dim 0 a multiple of ep=4"));
}

TEST(ParallelLayout, VllmReplicasAndItsExpertParallelism) {
  const std::vector<SafetensorsTensorSpec> model = MoeModel(2, 8);
  // tp 2 x pp 2 x dp 2: rank = (d * 2 + p) * 2 + t; stage 1 is ranks {2, 3, 6, 7}.
  const ParallelLayout pp2 = *ParallelLayout::Parse("vllm:tp=2,pp=2,dp=2");
  EXPECT_THAT(RanksOf(HomeOf(pp2, model, "model.layers.1.self_attn.q_proj.weight")),
              ElementsAre(2, 3, 6, 7));
  EXPECT_THAT(RanksOf(HomeOf(pp2, model, "model.layers.0.mlp.experts.5.down_proj.weight")),
              ElementsAre(0, 1, 4, 5));
  // ep = dp x tp = 4: expert k of 8 whole on rank k / 2.
  const ParallelLayout ep = *ParallelLayout::Parse("vllm:tp=2,dp=2,ep=4");
  const LaidOutTensor e = HomeOf(ep, model, "model.layers.1.mlp.experts.5.down_proj.weight");
  EXPECT_THAT(RanksOf(e), ElementsAre(2));
  EXPECT_EQ(e.mesh->shape(), (IntVector{1, 1}));
}

TEST(ParallelLayout, WhatARankHolds) {
  const std::vector<SafetensorsTensorSpec> model = MoeModel(4, 2);
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:tp=2,pp=2", 4);
  const Map rank3 = *layout.MetaStateDict(model, 3);
  EXPECT_EQ(rank3.Find("model.layers.0.self_attn.q_proj.weight"), nullptr);
  const Value* o = rank3.Find("model.layers.3.self_attn.o_proj.weight");
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->as_dtensor().local().shape(), (IntVector{8, 8}));  // [8, 16] cut on dim 1
  EXPECT_TRUE(o->as_dtensor().local().device().is_meta());
  ASSERT_NE(rank3.Find("lm_head.weight"), nullptr);
  // 2 layers x (4 + 2 experts x 2) tensors + norm + head.
  EXPECT_EQ(rank3.size(), 2u * 8u + 2u);
  // fsdp gives what the fsdp plan gives on a mesh of the world.
  const ParallelLayout fsdp = *ParallelLayout::Parse("fsdp:dp=4");
  const ShardingPlan plan = *ShardingPlan::Builtin("fsdp");
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("4"));
  for (int64_t r = 0; r < 4; ++r) {
    const Map a = *fsdp.MetaStateDict(model, r);
    const Map b = *plan.MetaStateDict(model, mesh, r);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a.value(i).as_dtensor().local().shape(), b.value(i).as_dtensor().local().shape());
      EXPECT_EQ(a.value(i).as_dtensor().placements(), b.value(i).as_dtensor().placements());
    }
  }
  // A rank outside the layout holds nothing of it (as ShardingPlan's); a negative one is
  // no rank.
  const absl::StatusOr<Map> outside = layout.MetaStateDict(model, 4);
  ASSERT_TRUE(outside.ok()) << outside.status();
  EXPECT_TRUE(outside->empty());
  EXPECT_TRUE(layout.MetaStateDict(model, 3, /*first_rank=*/4)->empty());
  EXPECT_THAT(std::string(layout.MetaStateDict(model, -1).status().message()),
              HasSubstr("rank -1 is negative"));
  // Placed after another layout's 4 ranks (an engine after its trainer): ranks 4-7.
  const Map rank7 = *layout.MetaStateDict(model, 7, /*first_rank=*/4);
  ASSERT_NE(rank7.Find("model.layers.3.self_attn.o_proj.weight"), nullptr);
  EXPECT_EQ(rank7.Find("model.layers.3.self_attn.o_proj.weight")->as_dtensor().mesh()->ranks(),
            (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(fsdp.Place(model, 4)->front().mesh->ranks(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_THAT(std::string(layout.Place(model, -1).status().message()),
              HasSubstr("first rank -1 outside"));
  std::vector<SafetensorsTensorSpec> twice = model;
  twice.push_back(model.back());
  EXPECT_THAT(std::string(layout.MetaStateDict(twice, 0).status().message()),
              HasSubstr("tensor lm_head.weight is listed twice"));
}

TEST(ParallelLayout, MegatronCoreNamesAndABareHead) {
  const std::vector<SafetensorsTensorSpec> model = {
      {"embedding.word_embeddings.weight", DType::kBFloat16, {32, 8}},
      {"decoder.layers.0.self_attention.linear_qkv.weight", DType::kBFloat16, {24, 8}},
      {"decoder.layers.1.self_attention.linear_proj.weight", DType::kBFloat16, {8, 16}},
      {"decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight", DType::kBFloat16, {8, 6}},
      {"decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight", DType::kBFloat16, {8, 6}},
      {"decoder.final_layernorm.weight", DType::kBFloat16, {8}},
      {"output_layer", DType::kBFloat16, {32, 8}}};
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:tp=2,pp=2,ep=2", 4);
  const std::vector<LaidOutTensor> placed = *layout.Place(model);
  EXPECT_EQ(PlacementsToString(placed[0].placements), "[R, S(0)]");
  EXPECT_THAT(RanksOf(placed[0]), ElementsAre(0, 1));
  EXPECT_EQ(PlacementsToString(placed[1].placements), "[R, S(0)]");
  EXPECT_EQ(PlacementsToString(placed[2].placements), "[R, S(1)]");
  EXPECT_THAT(RanksOf(placed[2]), ElementsAre(2, 3));
  // local_experts.K is expert K of 4: ep rank K / 2, whole on its one rank (etp 1).
  EXPECT_THAT(RanksOf(placed[3]), ElementsAre(3));
  EXPECT_THAT(RanksOf(placed[4]), ElementsAre(2));
  EXPECT_EQ(placed[3].mesh->dim_names(), (std::vector<std::string>{"edp", "etp"}));
  EXPECT_THAT(RanksOf(placed[5]), ElementsAre(2, 3));
  // A bare "output_layer" (no ".weight") is the head: the last stage.
  EXPECT_THAT(RanksOf(placed[6]), ElementsAre(2, 3));
}

// GPT-2 has no head tensor: its wte is the output layer too, so with stages it lives on the
// first and the last (vLLM and Megatron keep a copy there); with one stage, or with a head of
// its own, only on the first.
TEST(ParallelLayout, ATiedEmbeddingLivesOnTheFirstAndTheLastStage) {
  std::vector<SafetensorsTensorSpec> gpt2 = {{"wte.weight", DType::kBFloat16, {32, 8}},
                                             {"wpe.weight", DType::kBFloat16, {16, 8}}};
  for (int l = 0; l < 3; ++l) {
    gpt2.push_back({absl::StrCat("h.", l, ".attn.c_attn.weight"), DType::kBFloat16, {8, 24}});
  }
  gpt2.push_back({"ln_f.weight", DType::kBFloat16, {8}});
  const ParallelLayout megatron = *ParallelLayout::Parse("megatron:tp=2,pp=3", 6);
  const LaidOutTensor wte = HomeOf(megatron, gpt2, "wte.weight");
  EXPECT_THAT(RanksOf(wte), ElementsAre(0, 1, 4, 5));
  EXPECT_EQ(wte.mesh->shape(), (IntVector{2, 1, 2}));
  EXPECT_THAT(wte.mesh->dim_names(), ElementsAre("pp", "dp", "tp"));
  EXPECT_EQ(PlacementsToString(wte.placements), "[R, R, S(0)]");
  EXPECT_THAT(RanksOf(HomeOf(megatron, gpt2, "wpe.weight")), ElementsAre(0, 1));
  EXPECT_THAT(RanksOf(HomeOf(megatron, gpt2, "ln_f.weight")), ElementsAre(4, 5));
  // vLLM's stages interleave with its replicas: ranks (d * pp + stage) * tp + t.
  const ParallelLayout vllm = *ParallelLayout::Parse("vllm:tp=2,pp=2,dp=2", 8);
  EXPECT_THAT(RanksOf(HomeOf(vllm, gpt2, "wte.weight")), ElementsAre(0, 1, 4, 5, 2, 3, 6, 7));
  // One stage: the dense mesh; a head of its own: the first stage only.
  EXPECT_THAT(RanksOf(HomeOf(*ParallelLayout::Parse("megatron:tp=2", 2), gpt2, "wte.weight")),
              ElementsAre(0, 1));
  gpt2.push_back({"lm_head.weight", DType::kBFloat16, {32, 8}});
  EXPECT_THAT(RanksOf(HomeOf(megatron, gpt2, "wte.weight")), ElementsAre(0, 1));
  EXPECT_THAT(RanksOf(HomeOf(megatron, gpt2, "lm_head.weight")), ElementsAre(4, 5));
}

TEST(ParallelLayout, HostileNamesAndTooFewLayers) {
  const ParallelLayout layout = *ParallelLayout::Parse("megatron:pp=4", 4);
  EXPECT_THAT(std::string(layout.Place(MoeModel(2, 1)).status().message()),
              HasSubstr("pp=4 needs at least 4 layers, the model has 2"));
  const std::vector<SafetensorsTensorSpec> far = {
      {"model.layers.99999999999999999999.norm.weight", DType::kFloat32, {4}}};
  EXPECT_THAT(std::string(layout.Place(far).status().message()), HasSubstr("index"));
  const std::vector<SafetensorsTensorSpec> big = {
      {"layers.1048577.experts.2.w", DType::kFloat32, {4}}};
  EXPECT_THAT(std::string(layout.Place(big).status().message()), HasSubstr("above 1048576"));
}

}  // namespace
}  // namespace sdrt
