// The regroup rule (core/distributed/weight_map.h, kRegroup) against PyTorch: a Megatron
// trainer's interleaved linear_qkv ([q of group g; k of g; v of g] per kv group) and [gate; up]
// linear_fc1, cut by fsdp, go straight into vLLM-style tensor-parallel qkv_proj (with kv
// heads replicated when the ranks outnumber them) and gate_up_proj, and back, with no
// component tensor made anywhere: one plan tensor per source. Every local is compared bit for
// bit with tests/data/weight_map/expected.json (tests/golden/make_weight_map_golden.py: the
// vLLM layouts built with torch.cat / chunk from q, k, v, and the Megatron ones from the same
// tensors). CTest runs it under `mpiexec -n N`, N = 1..4 and 8: each case where its tp is the
// world.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/distributed/weight_map_golden_util.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing_weight_map_golden::g_world;
using testing_weight_map_golden::Golden;
using testing_weight_map_golden::TensorOf;
using testing_weight_map_golden::World;

constexpr int64_t kHeadSize = 4;
constexpr char kLinearQkv[] = "decoder.layers.0.self_attention.linear_qkv.weight";
constexpr char kLinearFc1[] = "decoder.layers.0.mlp.linear_fc1.weight";
constexpr char kWordEmbeddings[] = "embedding.word_embeddings.weight";
constexpr char kQkvProj[] = "model.layers.0.self_attn.qkv_proj.weight";
constexpr char kGateUpProj[] = "model.layers.0.mlp.gate_up_proj.weight";
constexpr char kEmbedTokens[] = "model.embed_tokens.weight";

// This rank's piece of `full`, Shard(0) over the world (fsdp).
Value Fsdp(const Tensor& full) { return testing_weight_map_golden::Piece(full, "[S(0)]"); }

// A Shard(0) destination over the world of `rows` global rows whose rank-r local is
// `local_shape`: meta, or allocated and filled with 0xFF bytes.
Value Buffer(const IntVector& local_shape, DType dtype, bool meta, int64_t rows) {
  IntVector global = local_shape;
  global[0] = rows;
  Tensor local = meta ? *Tensor::Meta(local_shape, dtype) : *Tensor::Empty(local_shape, dtype);
  if (!meta && local.nbytes() > 0) std::memset(local.data_ptr(), 0xFF, local.nbytes());
  return Value(*DTensor::Make(local, World(), *ParsePlacements("[S(0)]"), global));
}

void ExpectBytes(const Value* got, const Tensor& want, const std::string& what) {
  ASSERT_NE(got, nullptr) << what;
  const Tensor& local = got->as_dtensor().local();
  ASSERT_EQ(local.shape(), want.shape()) << what;
  ASSERT_EQ(local.dtype(), want.dtype()) << what;
  const Tensor dense = *local.Contiguous();
  EXPECT_EQ(std::memcmp(dense.data_ptr(), want.data_ptr(), want.nbytes()), 0)
      << what << " on rank " << g_world->rank();
}

// The map a Megatron trainer with `kv_heads` kv heads (24 query heads of 4, intermediate 48)
// gives for vLLM's buffers, as JSON: linear_qkv and linear_fc1 regrouped, the word
// embeddings renamed and padded to a multiple of 64 rows.
WeightMap MegatronToVllm(int64_t kv_heads) {
  const std::string text = absl::StrCat(R"({"rules": [
    {"regroup": "decoder\\.layers\\.(?P<i>\\d+)\\.self_attention\\.linear_qkv\\.weight",
     "to": "model.layers.{i}.self_attn.qkv_proj.weight", "head_size": 4,
     "from_interleave": "groups", "interleave": "shards", "sizes": [96, )",
                                        kv_heads * kHeadSize, ", ", kv_heads * kHeadSize, R"(]},
    {"regroup": "decoder\\.layers\\.(?P<i>\\d+)\\.mlp\\.linear_fc1\\.weight",
     "to": "model.layers.{i}.mlp.gate_up_proj.weight", "groups": 1, "sizes": [48, 48]},
    {"pad": "embedding\\.word_embeddings\\.weight", "to": "model.embed_tokens.weight",
     "multiple": 64}]})");
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(text);
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? *std::move(map) : WeightMap();
}

TEST(RegroupMpi, MegatronTrainerStraightIntoVllmBuffersBitExact) {
  ASSERT_FALSE(Golden().is_null()) << "tests/data/weight_map/expected.json";
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size()) continue;
    ++ran;
    const std::string name = c["name"];
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
    Map trainer;
    trainer.Set(kLinearQkv, Fsdp(TensorOf(c["sources"]["linear_qkv"])));
    trainer.Set(kLinearFc1, Fsdp(TensorOf(c["sources"]["linear_fc1"])));
    trainer.Set(kWordEmbeddings, Fsdp(TensorOf(c["sources"]["embed_tokens"])));
    for (bool meta : {true, false}) {
      Map engine;
      const std::pair<const char*, const char*> buffers[] = {
          {kQkvProj, "qkv_proj"}, {kGateUpProj, "gate_up_proj"}, {kEmbedTokens, "embed_tokens"}};
      for (const auto& [path, key] : buffers) {
        const Tensor want = TensorOf(mine[key]);
        const int64_t rows = path == kEmbedTokens ? c["embed_padded_rows"].get<int64_t>()
                                                  : want.shape()[0] * g_world->size();
        engine.Set(path, Buffer(want.shape(), want.dtype(), meta, rows));
      }
      ReshardOptions options;
      options.comm = g_world;
      options.weight_map = MegatronToVllm(c["num_kv_heads"].get<int64_t>());
      const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
      ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
      // One plan tensor per source: no q, k, v, gate or up is made on the way.
      EXPECT_EQ(plan->paths().size(), 3u) << name;
      const int runs = meta ? 1 : 2;
      absl::StatusOr<BoundReshard> bound;
      if (!meta) {
        bound = BindReshard(*plan, trainer, engine);
        ASSERT_TRUE(bound.ok()) << name << ": " << bound.status();
      }
      for (int run = 0; run < runs; ++run) {
        if (meta) {
          ASSERT_TRUE(ExecuteReshard(*plan, trainer, engine).ok()) << name;
        } else {
          // Every byte of the fused buffers is written by each run (the pad's zero rows
          // by the binding, once).
          for (const char* path : {kQkvProj, kGateUpProj}) {
            const Tensor& local = engine.Find(path)->as_dtensor().local();
            std::memset(local.data_ptr(), 0xFF, local.nbytes());
          }
          ASSERT_TRUE(bound->Execute().ok()) << name;
        }
        for (const auto& [path, key] : buffers) {
          ExpectBytes(engine.Find(path), TensorOf(mine[key]),
                      absl::StrCat(name, " ", key, meta ? " (executed)" : " (bound, run ", run,
                                   ")"));
        }
      }
    }
  }
  if (g_world->size() <= 4 || g_world->size() == 8) {
    EXPECT_GT(ran, 0) << "no vLLM case for " << g_world->size() << " ranks";
  }
}

TEST(RegroupMpi, VllmBuffersRegroupedBackIntoMegatronFsdp) {
  ASSERT_FALSE(Golden().is_null());
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size() || c["source_dtype"] != c["dtype"]) {
      continue;
    }
    ++ran;
    const std::string name = c["name"];
    const int64_t kv = c["num_kv_heads"].get<int64_t>();
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
    // The engine's locals as the source: replicated kv heads are sent by one of their holders.
    Map engine;
    for (const auto& [path, key] : {std::pair{kQkvProj, "qkv_proj"},
                                    std::pair{kGateUpProj, "gate_up_proj"}}) {
      const Tensor local = TensorOf(mine[key]);
      IntVector global = local.shape();
      global[0] *= g_world->size();
      engine.Set(path, Value(*DTensor::Make(local, World(), *ParsePlacements("[S(0)]"), global)));
    }
    const Tensor qkv = TensorOf(c["sources"]["linear_qkv"]);
    const Tensor fc1 = TensorOf(c["sources"]["linear_fc1"]);
    Map trainer;
    for (const auto& [path, full] : {std::pair{kLinearQkv, &qkv}, std::pair{kLinearFc1, &fc1}}) {
      const Tensor& want = Fsdp(*full).as_dtensor().local();
      trainer.Set(path, Buffer(want.shape(), want.dtype(), true, full->shape()[0]));
    }
    WeightMapRule qkv_rule;
    qkv_rule.kind = WeightMapRule::Kind::kRegroup;
    qkv_rule.from = {R"(model\.layers\.(\d+)\.self_attn\.qkv_proj\.weight)"};
    qkv_rule.to = {"decoder.layers.{1}.self_attention.linear_qkv.weight"};
    qkv_rule.head_size = kHeadSize;
    qkv_rule.source_interleave = WeightMapRule::Interleave::kShards;
    qkv_rule.interleave = WeightMapRule::Interleave::kGroups;
    qkv_rule.sizes = {96, kv * kHeadSize, kv * kHeadSize};
    WeightMapRule fc1_rule = qkv_rule;
    fc1_rule.from = {R"(model\.layers\.(\d+)\.mlp\.gate_up_proj\.weight)"};
    fc1_rule.to = {"decoder.layers.{1}.mlp.linear_fc1.weight"};
    fc1_rule.head_size = 0;
    fc1_rule.groups = 1;
    fc1_rule.sizes = {48, 48};
    ReshardOptions options;
    options.comm = g_world;
    options.weight_map = *WeightMap::FromRules({qkv_rule, fc1_rule});
    const absl::Status status = ReshardStateDict(engine, trainer, options);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    ExpectBytes(trainer.Find(kLinearQkv), Fsdp(qkv).as_dtensor().local(), name + " linear_qkv");
    ExpectBytes(trainer.Find(kLinearFc1), Fsdp(fc1).as_dtensor().local(), name + " linear_fc1");
  }
  if (g_world->size() <= 4 || g_world->size() == 8) {
    EXPECT_GT(ran, 0);
  }
}

TEST(RegroupMpi, APlanSaysWhichSideCastsEachTensor) {
  // bfloat16 linear_qkv into float32 qkv_proj buffers: the wire carries the narrower
  // bfloat16, the receivers widen (exactly); float32 sources into bfloat16 buffers (the
  // golden's "_cast" cases) are narrowed by the senders.
  ASSERT_FALSE(Golden().is_null());
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size()) continue;
    const std::string name = c["name"];
    const bool narrowing = c["source_dtype"] != c["dtype"];
    Map trainer;
    trainer.Set(kLinearQkv, Fsdp(TensorOf(c["sources"]["linear_qkv"])));
    const Tensor want = TensorOf(c["ranks"][static_cast<size_t>(g_world->rank())]["qkv_proj"]);
    const DType into = narrowing ? DType::kBFloat16 : DType::kFloat32;
    Map engine;
    engine.Set(kQkvProj, Buffer(want.shape(), into, false, want.shape()[0] * g_world->size()));
    ReshardOptions options;
    options.comm = g_world;
    options.weight_map = MegatronToVllm(c["num_kv_heads"].get<int64_t>());
    const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
    ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
    ASSERT_EQ(plan->casts().size(), 1u) << name;
    const PlannedCast& cast = plan->casts()[0];
    EXPECT_EQ(cast.path, kLinearQkv);
    EXPECT_EQ(cast.destination, into);
    EXPECT_EQ(cast.by_senders, narrowing) << name;
    TransferStats stats;
    ASSERT_TRUE(ExecuteReshard(*plan, trainer, engine, &stats).ok()) << name;
    EXPECT_EQ(stats.cast_by_senders, narrowing ? 1 : 0) << name;
    EXPECT_EQ(stats.cast_by_receivers, narrowing ? 0 : 1) << name;
    const Tensor& got = engine.Find(kQkvProj)->as_dtensor().local();
    Tensor back = *Tensor::Empty(got.shape(), DType::kBFloat16);
    ASSERT_TRUE(internal::ConvertFloats(got.data_ptr(), got.dtype(), back.data_ptr(),
                                        DType::kBFloat16, got.numel()));
    EXPECT_EQ(std::memcmp(back.data_ptr(), want.data_ptr(), want.nbytes()), 0) << name;
  }
}

TEST(RegroupMpi, SplitIntoPlainMetaLeavesOnRankZero) {
  // An export: the Megatron tensors split into whole Hugging Face tensors on rank 0 alone,
  // given as plain meta leaves, which the reshard allocates.
  ASSERT_FALSE(Golden().is_null());
  const absl::StatusOr<WeightMap> map = WeightMap::Builtin("megatron-llama", kHeadSize);
  ASSERT_TRUE(map.ok()) << map.status();
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size() || c["source_dtype"] != c["dtype"]) {
      continue;
    }
    const std::string name = c["name"];
    Map trainer;
    trainer.Set(kLinearQkv, Fsdp(TensorOf(c["sources"]["linear_qkv"])));
    trainer.Set(kLinearFc1, Fsdp(TensorOf(c["sources"]["linear_fc1"])));
    const std::pair<const char*, const char*> hf[] = {
        {"model.layers.0.self_attn.q_proj.weight", "q_proj"},
        {"model.layers.0.self_attn.k_proj.weight", "k_proj"},
        {"model.layers.0.self_attn.v_proj.weight", "v_proj"},
        {"model.layers.0.mlp.gate_proj.weight", "gate_proj"},
        {"model.layers.0.mlp.up_proj.weight", "up_proj"}};
    Map full;
    if (g_world->rank() == 0) {
      for (const auto& [path, key] : hf) {
        const Tensor want = TensorOf(c["sources"][key]);
        full.Set(path, Value(*Tensor::Meta(want.shape(), want.dtype())));
      }
    }
    ReshardOptions options;
    options.comm = g_world;
    options.weight_map = *map;
    const absl::Status status = ReshardStateDict(trainer, full, options);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    if (g_world->rank() != 0) continue;
    for (const auto& [path, key] : hf) {
      const Value* got = full.Find(path);
      ASSERT_NE(got, nullptr) << path;
      ASSERT_EQ(got->kind(), ValueKind::kTensor) << path;
      ASSERT_FALSE(got->as_tensor().is_meta()) << path;
      const Tensor want = TensorOf(c["sources"][key]);
      EXPECT_EQ(std::memcmp(got->as_tensor().data_ptr(), want.data_ptr(), want.nbytes()), 0)
          << name << " " << key;
    }
  }
}

TEST(RegroupMpi, SizesThatDoNotMakeTheSourceFailOnEveryRank) {
  const int64_t n = g_world->size();
  // 8 query heads per rank and one kv group: linear_qkv holds 8 n + 2 heads.
  const Tensor qkv = *Tensor::Zeros({(8 * n + 2) * kHeadSize, 8}, DType::kBFloat16);
  Map trainer;
  trainer.Set(kLinearQkv, Fsdp(qkv));
  Map engine;
  engine.Set(kQkvProj, Buffer({(8 + 2) * kHeadSize, 8}, DType::kBFloat16, true,
                              (8 + 2) * kHeadSize * n));
  WeightMapRule rule;
  rule.kind = WeightMapRule::Kind::kRegroup;
  rule.from = {kLinearQkv};
  rule.to = {kQkvProj};
  rule.head_size = kHeadSize;
  rule.groups = 1;
  ReshardOptions options;
  options.comm = g_world;
  // A query head too many in the sizes: the source's rows are not what they make.
  rule.sizes = {(8 * n + 1) * kHeadSize, kHeadSize, kHeadSize};
  options.weight_map = *WeightMap::FromRules({rule});
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("weight map rule 0 (regroup)"));
  EXPECT_THAT(plan.status().message(), HasSubstr("its source"));
  // The right sizes plan; the destination's tensors follow from the source's alone.
  rule.sizes = {8 * n * kHeadSize, kHeadSize, kHeadSize};
  options.weight_map = *WeightMap::FromRules({rule});
  EXPECT_TRUE(PlanReshard(trainer, engine, options).ok());
  const absl::StatusOr<std::vector<SafetensorsTensorSpec>> specs =
      options.weight_map.DestinationTensors(
          {{kLinearQkv, DType::kBFloat16, qkv.shape()}},
          [&](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> { return n; });
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 1u);
  EXPECT_EQ((*specs)[0].name, kQkvProj);
  // One kv head replicated on every rank: n parts of 8 query heads and 2 kv heads.
  EXPECT_EQ((*specs)[0].shape, (IntVector{(8 + 2) * kHeadSize * n, 8}));
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_weight_map_golden::g_world);
}
