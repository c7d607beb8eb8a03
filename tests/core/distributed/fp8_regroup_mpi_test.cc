// A Megatron-named fsdp trainer synced straight into vLLM-style FP8 buffers with scales by the
// regroup rule (core/distributed/weight_map.h): linear_qkv ([2 q heads; k head; v head] per
// kv group) into qkv_proj, linear_fc1 into gate_up_proj, linear_proj and linear_fc2 renamed,
// each quantized by its senders with a scale per 128 x 128 block (or per tensor). Since
// every 128-row block of linear_qkv is one of q, k or v's, the codes and scales equal those
// PyTorch makes from the Hugging Face tensors: tests/data/fp8_map/expected.json
// (tests/golden/make_fp8_map_golden.py, which also gives the Megatron tensors' FNV-1a so the
// test checks the rows it builds them from). One-shot and bound, run twice; a head size
// that would cut blocks is refused on every rank. Both ways with FP8 on the Megatron side
// too: an FP8 Megatron trainer (codes beside block scales) regrouped and dequantized into
// vLLM's bf16 buffers, and a bf16 one split by the megatron-llama map into Hugging Face FP8
// tensors with block scales, each against PyTorch's (the golden's dequant cases). CTest runs
// it under `mpiexec -n N`, N = 1, 2, 4: the cases whose tp is the world.

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tests/core/distributed/fp8_map_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;
using testing_fp8_map::json;
using testing_fp8_map::Bf16Buffers;
using testing_fp8_map::Buffer;
using testing_fp8_map::CodesDType;
using testing_fp8_map::EngineBuffers;
using testing_fp8_map::ExpectBoundTwice;
using testing_fp8_map::ExpectDequantized;
using testing_fp8_map::ExpectGolden;
using testing_fp8_map::Fnv;
using testing_fp8_map::g_world;
using testing_fp8_map::Golden;
using testing_fp8_map::HfName;
using testing_fp8_map::kDestinations;
using testing_fp8_map::kOrder;
using testing_fp8_map::MegatronSources;
using testing_fp8_map::Raw;
using testing_fp8_map::Sources;
using testing_fp8_map::World;

constexpr int64_t kHead = 128;
constexpr char kLayer[] = "decoder.layers.0.";

Map FsdpTrainer(const std::map<std::string, Tensor>& sources) {
  Map m;
  for (const auto& [name, full] : sources) {
    m.Set(std::string(kLayer) + name,
          Value(*DistributeTensor(full, World(), *ParsePlacements("[S(0)]"), g_world->rank())));
  }
  return m;
}

// The trainer's map into vLLM's names: q has 4 heads of `head` rows, k and v 2.
ReshardOptions MegatronToVllm(int64_t head) {
  const std::string layer = R"(decoder\.layers\.(\d+)\.)";
  std::vector<WeightMapRule> rules(4);
  rules[0].kind = WeightMapRule::Kind::kRegroup;
  rules[0].from = {layer + R"(self_attention\.linear_qkv\.weight)"};
  rules[0].to = {"model.layers.{1}.self_attn.qkv_proj.weight"};
  rules[0].head_size = head;
  rules[0].sizes = {4 * kHead, 2 * kHead, 2 * kHead};
  rules[1].kind = WeightMapRule::Kind::kRegroup;
  rules[1].from = {layer + R"(mlp\.linear_fc1\.weight)"};
  rules[1].to = {"model.layers.{1}.mlp.gate_up_proj.weight"};
  rules[1].groups = 1;
  rules[1].sizes = {512, 512};
  rules[2].from = {layer + R"(self_attention\.linear_proj\.weight)"};
  rules[2].to = {"model.layers.{1}.self_attn.o_proj.weight"};
  rules[3].from = {layer + R"(mlp\.linear_fc2\.weight)"};
  rules[3].to = {"model.layers.{1}.mlp.down_proj.weight"};
  ReshardOptions options;
  options.comm = g_world;
  options.weight_map = *WeightMap::FromRules(rules);
  return options;
}

TEST(Fp8RegroupMpi, TheMegatronTensorsAreTheGoldenScripts) {
  ASSERT_FALSE(Golden().is_null()) << "tests/data/fp8_map/expected.json";
  const std::map<std::string, Tensor> sources = MegatronSources();
  EXPECT_EQ(Fnv(sources.at("self_attention.linear_qkv.weight")),
            Golden()["megatron_fnv"]["linear_qkv"].get<std::string>());
  EXPECT_EQ(Fnv(sources.at("mlp.linear_fc1.weight")),
            Golden()["megatron_fnv"]["linear_fc1"].get<std::string>());
}

TEST(Fp8RegroupMpi, MegatronFsdpTrainerIntoFp8BuffersBitExact) {
  ASSERT_FALSE(Golden().is_null());
  const Map trainer = FsdpTrainer(MegatronSources());
  const ReshardOptions options = MegatronToVllm(kHead);
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["tp"] != g_world->size()) continue;
    ++ran;
    const std::string name = c["name"];
    Map engine = EngineBuffers(c);
    TransferStats stats;
    const absl::Status one_shot = ReshardStateDict(trainer, engine, options, &stats);
    ASSERT_TRUE(one_shot.ok()) << name << ": " << one_shot;
    ExpectGolden(c, engine, "regrouped one-shot");
    // Four plan tensors, each quantized by its senders: no q, k, v, gate or up anywhere.
    EXPECT_EQ(stats.cast_by_senders, 4) << name;
    EXPECT_EQ(stats.cast_by_receivers, 0) << name;
    const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->paths().size(), 4u) << name;
    ExpectBoundTwice(*plan, trainer, c, "regrouped bound");
  }
  if (g_world->size() != 3) {
    EXPECT_EQ(ran, 4);
  }
}

TEST(Fp8RegroupMpi, AHeadSizeThatCutsBlocksFailsOnEveryRank) {
  ASSERT_FALSE(Golden().is_null());
  const Map trainer = FsdpTrainer(MegatronSources());
  for (const json& c : Golden()["cases"]) {
    if (c["tp"] != g_world->size() || c["block"].get<int64_t>() == 0) continue;
    // Heads of 64 rows: the groups (and so the pieces) start off the 128-row blocks. On 4
    // ranks the 4 kv heads of 64 rows need no replication, so qkv_proj is the wrong size
    // first.
    Map engine = EngineBuffers(c);
    const absl::Status status = ReshardStateDict(trainer, engine, MegatronToVllm(64));
    ASSERT_FALSE(status.ok()) << c["name"];
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    if (g_world->size() == 4) {
      EXPECT_THAT(message, HasSubstr("(regroup) for 'model.layers.0.self_attn.qkv_proj.weight': "
                                     "the fused dim is 1536; the components make 1024"));
    } else {
      EXPECT_THAT(message, HasSubstr("does not fit"));
      EXPECT_THAT(message, HasSubstr("linear_qkv"));
    }
    return;
  }
}

// The Megatron tensors of a dequant case as an FP8 trainer holds them: each quantized by its
// own 128 x 128 blocks, beside its "_scale_inv". With heads of 128 rows every block of
// linear_qkv (linear_fc1) is one of q, k or v's (gate or up's), so these are the Hugging Face
// tensors' codes and scales, interleaved as the tensors are.
std::map<std::string, Tensor> MegatronFp8(const json& c) {
  const DType scale = c["scale_format"] == "e8m0" ? DType::kFloat8E8M0FNU : DType::kFloat32;
  std::map<std::string, Tensor> out;
  for (const auto& [name, x] : MegatronSources()) {
    const int64_t rows = x.shape()[0], cols = x.shape()[1];
    Tensor codes = *Tensor::Empty({rows, cols}, CodesDType(c));
    Tensor scales = *Tensor::Empty({(rows + 127) / 128, (cols + 127) / 128}, scale);
    EXPECT_TRUE(internal::QuantizeMatrix(x.data_ptr(), x.dtype(), rows, cols, 128,
                                         codes.data_ptr(), CodesDType(c), scales.data_ptr(),
                                         scale));
    out[name] = codes;
    out[name + "_scale_inv"] = scales;
  }
  return out;
}

TEST(Fp8RegroupMpi, AnFp8MegatronTrainerDequantizedIntoBf16BuffersBitExact) {
  // The regroup takes FP8 codes with their scales into vLLM's bfloat16 buffers: the codes move
  // as they are, each rank dequantizes what it holds. PyTorch's values: the golden's dequant
  // cases (made from the Hugging Face tensors' FP8).
  ASSERT_FALSE(Golden().is_null());
  const ReshardOptions options = MegatronToVllm(kHead);
  int ran = 0;
  for (const json& c : Golden()["dequant_cases"]) {
    if (c["tp"] != g_world->size() || c["block"].get<int64_t>() == 0) continue;
    ++ran;
    const std::string name = c["name"];
    const Map trainer = FsdpTrainer(MegatronFp8(c));
    Map engine = Bf16Buffers(c);
    TransferStats stats;
    const absl::Status synced = ReshardStateDict(trainer, engine, options, &stats);
    ASSERT_TRUE(synced.ok()) << name << ": " << synced;
    ExpectDequantized(c, engine, "regrouped");
    EXPECT_EQ(stats.cast_by_senders + stats.cast_by_receivers, 0) << name;
    // Bound: the same buffers, written afresh.
    Map bound_engine = Bf16Buffers(c);
    const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, bound_engine, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, bound_engine);
    ASSERT_TRUE(sync.ok()) << sync.status();
    ASSERT_TRUE(sync->Execute().ok()) << name;
    ExpectDequantized(c, bound_engine, "regrouped bound");
  }
  if (g_world->size() != 3) {
    EXPECT_EQ(ran, 3);
  }
}

// Every Hugging Face tensor as FP8 codes of `c` with block scales (or one scale: `per_tensor`
// for q, k and v), whole on every rank.
Map Fp8HuggingFace(const json& c, bool per_tensor) {
  const DType scale = c["scale_format"] == "e8m0" ? DType::kFloat8E8M0FNU : DType::kFloat32;
  Map hf;
  for (const char* key : kOrder) {
    const IntVector shape = Golden()["shapes"][key].get<IntVector>();
    hf.Set(HfName(key), Buffer(shape, CodesDType(c), "[R]", -1));
    const std::string k = key;
    if (per_tensor && (k == "q_proj" || k == "k_proj" || k == "v_proj")) {
      hf.Set(HfName(key) + "_scale", Buffer({1}, scale, "[R]", -1));
      continue;
    }
    hf.Set(HfName(key) + "_scale_inv",
           Buffer({(shape[0] + 127) / 128, (shape[1] + 127) / 128}, scale, "[R]", -1));
  }
  return hf;
}

TEST(Fp8RegroupMpi, AMegatronTrainerSplitIntoFp8HuggingFaceTensorsBitExact) {
  // The megatron-llama map's splits into FP8 destinations: linear_qkv's blocks quantized by
  // its senders are q, k and v's own blocks, so each part's codes and scales are PyTorch's
  // quantization of the Hugging Face tensor (the golden dequant cases' inputs).
  ASSERT_FALSE(Golden().is_null());
  const Map trainer = FsdpTrainer(MegatronSources());
  ReshardOptions options;
  options.comm = g_world;
  options.weight_map = *WeightMap::Builtin("megatron-llama", kHead);
  int ran = 0;
  for (const json& c : Golden()["dequant_cases"]) {
    if (c["tp"] != 1 || c["block"].get<int64_t>() == 0) continue;  // the inputs, whatever tp
    ++ran;
    const std::string name = c["name"];
    Map hf = Fp8HuggingFace(c, false);
    TransferStats stats;
    const absl::Status synced = ReshardStateDict(trainer, hf, options, &stats);
    ASSERT_TRUE(synced.ok()) << name << ": " << synced;
    for (const char* key : kOrder) {
      const json& want = c["inputs"][key];
      EXPECT_EQ(Fnv(hf.Find(HfName(key))->as_dtensor().local()),
                want["codes_fnv"].get<std::string>())
          << name << " " << key << " on rank " << g_world->rank();
      EXPECT_EQ(Raw(hf.Find(HfName(key) + "_scale_inv")->as_dtensor().local()),
                want["scales"].get<std::vector<int64_t>>())
          << name << " " << key << " on rank " << g_world->rank();
    }
    // linear_qkv, linear_fc1, linear_proj and linear_fc2, each quantized by its senders.
    EXPECT_EQ(stats.cast_by_senders, 4) << name;
    // One scale per tensor for the parts: refused on every rank (a part's amax is not its
    // source's). Parts of different recipes too.
    Map per_tensor = Fp8HuggingFace(c, true);
    const absl::Status refused = ReshardStateDict(trainer, per_tensor, options);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(std::string(refused.message()),
                HasSubstr("the parts of a split are quantized by blocks of their source"));
    Map mixed = Fp8HuggingFace(c, false);
    const Tensor& k_scales = mixed.Find(HfName("k_proj") + "_scale_inv")->as_dtensor().local();
    mixed.Set(HfName("k_proj") + "_scale_inv",
              Buffer(k_scales.shape(),
                     k_scales.dtype() == DType::kFloat32 ? DType::kFloat8E8M0FNU : DType::kFloat32,
                     "[R]", -1));
    const absl::Status unlike = ReshardStateDict(trainer, mixed, options);
    EXPECT_EQ(unlike.code(), absl::StatusCode::kInvalidArgument) << unlike;
    EXPECT_THAT(std::string(unlike.message()), HasSubstr("are not FP8 alike"));
  }
  EXPECT_EQ(ran, 3);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_fp8_map::g_world);
}
