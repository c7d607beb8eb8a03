// A Megatron-named fsdp trainer synced straight into vLLM-style FP8 buffers with scales by the
// regroup rule (core/distributed/weight_map.h): linear_qkv ([2 q heads; k head; v head] per
// kv group) into qkv_proj, linear_fc1 into gate_up_proj, linear_proj and linear_fc2 renamed,
// each quantized by its senders with a scale per 128 x 128 block (or per tensor). Since
// every 128-row block of linear_qkv is one of q, k or v's, the codes and scales equal those
// PyTorch makes from the Hugging Face tensors: tests/data/fp8_map/expected.json
// (tests/golden/make_fp8_map_golden.py, which also gives the Megatron tensors' FNV-1a so the
// test checks the rows it builds them from). One-shot and bound, run twice; a head size
// that would cut blocks is refused on every rank. CTest runs it under `mpiexec -n N`,
// N = 1, 2, 4: the cases whose tp is the world.

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
#include "sdrt/tests/core/distributed/fp8_map_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;
using testing_fp8_map::json;
using testing_fp8_map::EngineBuffers;
using testing_fp8_map::ExpectBoundTwice;
using testing_fp8_map::ExpectGolden;
using testing_fp8_map::Fnv;
using testing_fp8_map::g_world;
using testing_fp8_map::Golden;
using testing_fp8_map::HfName;
using testing_fp8_map::kDestinations;
using testing_fp8_map::Sources;
using testing_fp8_map::World;

constexpr int64_t kHead = 128;
constexpr char kLayer[] = "decoder.layers.0.";

// Rows [row, row + count) of `from` appended to `to` at `at` (rows of the same width).
void CopyRows(const Tensor& from, int64_t row, int64_t count, Tensor& to, int64_t& at) {
  const int64_t width = from.nbytes() / from.shape()[0];
  std::memcpy(static_cast<char*>(to.data_ptr()) + at * width,
              static_cast<const char*>(from.data_ptr()) + row * width,
              static_cast<size_t>(count * width));
  at += count;
}

// The layer as a Megatron trainer holds it, by Megatron's names: linear_qkv interleaved by
// the kv heads' groups, linear_fc1 [gate; up], linear_proj and linear_fc2 as o_proj and
// down_proj.
std::map<std::string, Tensor> MegatronSources() {
  const std::map<std::string, Tensor> hf = Sources();
  const Tensor& q = hf.at("q_proj");
  const Tensor& k = hf.at("k_proj");
  const int64_t groups = k.shape()[0] / kHead, cols = q.shape()[1];
  const int64_t per_group = q.shape()[0] / groups;
  Tensor qkv = *Tensor::Empty({q.shape()[0] + 2 * k.shape()[0], cols}, DType::kBFloat16);
  int64_t at = 0;
  for (int64_t g = 0; g < groups; ++g) {
    CopyRows(q, g * per_group, per_group, qkv, at);
    CopyRows(k, g * kHead, kHead, qkv, at);
    CopyRows(hf.at("v_proj"), g * kHead, kHead, qkv, at);
  }
  const Tensor& gate = hf.at("gate_proj");
  Tensor fc1 = *Tensor::Empty({2 * gate.shape()[0], cols}, DType::kBFloat16);
  at = 0;
  CopyRows(gate, 0, gate.shape()[0], fc1, at);
  CopyRows(hf.at("up_proj"), 0, gate.shape()[0], fc1, at);
  return {{"self_attention.linear_qkv.weight", qkv},
          {"mlp.linear_fc1.weight", fc1},
          {"self_attention.linear_proj.weight", hf.at("o_proj")},
          {"mlp.linear_fc2.weight", hf.at("down_proj")}};
}

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

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_fp8_map::g_world);
}
