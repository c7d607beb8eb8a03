// Parallel layouts (core/checkpoint/parallel_layout.h) through the one engine, over MPI: a
// Megatron-laid-out MoE trainer (pipeline stages, experts on their ep ranks) resharded into
// a vLLM engine's layout (tp replicas, expert parallelism) and back, every piece bit-exact
// against DistributeTensor of the full tensor. Each rank holds only what its layout gives
// it (a pipeline stage's tensors, its experts). CTest runs it under `mpiexec -n N`,
// N = 1..4 and 8.
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

MpiCommunicator* g_world = nullptr;

// Four layers of eight experts, with a router, shared expert, norms, embedding and head.
std::vector<SafetensorsTensorSpec> Model() {
  std::vector<SafetensorsTensorSpec> t = {
      {"model.embed_tokens.weight", DType::kBFloat16, {40, 12}}};
  for (int l = 0; l < 4; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t.push_back({p + "self_attn.q_proj.weight", DType::kBFloat16, {24, 12}});
    t.push_back({p + "self_attn.o_proj.weight", DType::kBFloat16, {12, 24}});
    t.push_back({p + "input_layernorm.weight", DType::kFloat32, {12}});
    t.push_back({p + "mlp.gate.weight", DType::kFloat32, {8, 12}});
    t.push_back({p + "mlp.shared_experts.up_proj.weight", DType::kBFloat16, {10, 12}});
    for (int e = 0; e < 8; ++e) {
      const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
      t.push_back({x + "gate_proj.weight", DType::kBFloat16, {10, 12}});
      t.push_back({x + "down_proj.weight", DType::kBFloat16, {12, 10}});
    }
  }
  t.push_back({"model.norm.weight", DType::kFloat32, {12}});
  t.push_back({"lm_head.weight", DType::kBFloat16, {40, 12}});
  return t;
}

Tensor FullOf(const SafetensorsTensorSpec& t) {
  return HashBytes(t.shape, t.dtype, std::hash<std::string>()(t.name) % 1009);
}

// What this rank holds of every tensor under `layout`, with the full tensors' values.
Map Filled(const ParallelLayout& layout, const std::vector<SafetensorsTensorSpec>& model) {
  const std::vector<LaidOutTensor> placed = *layout.Place(model);
  Map m;
  for (size_t i = 0; i < model.size(); ++i) {
    if (!placed[i].mesh->Coordinate(g_world->rank()).has_value()) continue;
    m.Set(model[i].name, Value(*DistributeTensor(FullOf(model[i]), placed[i].mesh,
                                                 placed[i].placements, g_world->rank())));
  }
  return m;
}

// Reshards `from` into `to` and checks every tensor this rank holds under `to`.
void ExpectReshardBitExact(const std::string& from, const std::string& to) {
  SCOPED_TRACE(from + " -> " + to);
  const int64_t n = g_world->size();
  const ParallelLayout source = *ParallelLayout::Parse(from, n);
  const ParallelLayout destination = *ParallelLayout::Parse(to, n);
  const std::vector<SafetensorsTensorSpec> model = Model();
  Map engine = *destination.MetaStateDict(model, g_world->rank());
  const size_t held = engine.size();
  ReshardOptions options;
  options.comm = g_world;
  options.bucket_bytes = 4096;  // several exchanges
  TransferStats stats;
  const absl::Status status = ReshardStateDict(Filled(source, model), engine, options, &stats);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(engine.size(), held);
  const Map want = Filled(destination, model);
  ASSERT_EQ(want.size(), held);
  for (size_t i = 0; i < want.size(); ++i) {
    const Value* got = engine.Find(want.key(i));
    ASSERT_NE(got, nullptr) << want.key(i);
    const Tensor& a = got->as_dtensor().local();
    const Tensor& b = want.value(i).as_dtensor().local();
    ASSERT_EQ(a.shape(), b.shape()) << want.key(i);
    EXPECT_TRUE(b.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), b.nbytes()) == 0)
        << want.key(i) << " on rank " << g_world->rank();
  }
}

// A trainer and an engine layout of this world's size.
std::pair<std::string, std::string> Layouts() {
  switch (g_world->size()) {
    case 1:
      return {"megatron:", "vllm:"};
    case 2:
      return {"megatron:pp=2", "vllm:tp=2"};
    case 3:
      return {"megatron:pp=3", "vllm:tp=3"};
    case 4:
      return {"megatron:tp=2,pp=2,ep=2", "vllm:tp=2,dp=2,ep=4"};
    default:
      return {"megatron:tp=2,pp=2,ep=4", "vllm:tp=2,dp=4,ep=8"};
  }
}

TEST(ParallelLayoutReshardMpi, MegatronTrainerIntoVllmEngine) {
  const auto [trainer, engine] = Layouts();
  ExpectReshardBitExact(trainer, engine);
}

TEST(ParallelLayoutReshardMpi, VllmEngineBackIntoMegatron) {
  const auto [trainer, engine] = Layouts();
  ExpectReshardBitExact(engine, trainer);
}

TEST(ParallelLayoutReshardMpi, FsdpIntoMegatronStages) {
  const auto [trainer, engine] = Layouts();
  ExpectReshardBitExact("fsdp:", trainer);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
