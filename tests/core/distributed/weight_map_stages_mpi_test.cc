// A weight map loaded into pipeline stages (`sdrt load --map vllm-llama --plan
// vllm:tp=T,pp=2`): an HF checkpoint of two layers with the same tensors in each, loaded
// with the built-in map "vllm-llama" into a vLLM engine of two stages of T ranks, each stage
// holding its own layer's fused qkv_proj and gate_up_proj (the first also the padded
// embedding) on a mesh of its ranks only, as ParallelLayout places them. Every rank's locals
// are compared bit for bit with the golden of tests/data/weight_map/expected.json (PyTorch's
// torch.cat / chunk / F.pad) for tp T, whatever the stage: each stage is that engine alone.
// Read by every rank (kAll), and from an sdrt sharded folder of the checkpoint (fsdp over 3
// ranks, resharded). CTest runs it under `mpiexec -n 2` and `-n 4` (T = 1 and 2).
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/distributed/weight_map_golden_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using json = nlohmann::json;
using testing_weight_map_golden::g_world;
using testing_weight_map_golden::Golden;
using testing_weight_map_golden::TensorOf;

constexpr int64_t kHeadSize = 4;

// The HF tensors of a layer in the golden's sources, by the golden's key.
const char* const kLayerKeys[] = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"};

std::string LayerName(int layer, const std::string& key) {
  const bool attn = key[1] == '_' || key == "qkv_proj";
  return absl::StrCat("model.layers.", layer, attn ? ".self_attn." : ".mlp.", key, ".weight");
}

// The golden key of an engine tensor name ("model.layers.1.mlp.gate_up_proj.weight" ->
// "gate_up_proj").
std::string KeyOf(const std::string& name) {
  if (name == "model.embed_tokens.weight") return "embed_tokens";
  const size_t end = name.rfind(".weight");
  return name.substr(name.rfind('.', end - 1) + 1, end - name.rfind('.', end - 1) - 1);
}

TEST(WeightMapStagesMpi, EachStageLoadsItsLayerIntoVllmBuffers) {
  ASSERT_FALSE(Golden().is_null());
  const int64_t tp = g_world->size() / 2;
  const absl::StatusOr<WeightMap> map = WeightMap::Builtin("vllm-llama", kHeadSize);
  ASSERT_TRUE(map.ok());
  const absl::StatusOr<ParallelLayout> layout =
      ParallelLayout::Parse(absl::StrCat("vllm:tp=", tp, ",pp=2"), g_world->size());
  ASSERT_TRUE(layout.ok()) << layout.status();
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != tp) continue;
    ++ran;
    const std::string name = c["name"];
    const std::string dir = SharedTempDir(*g_world, "sdrt_stages_");
    ASSERT_FALSE(dir.empty());
    const std::string file = dir + "/model.safetensors";
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.emplace_back("model.embed_tokens.weight", TensorOf(c["sources"]["embed_tokens"]));
    for (int layer : {0, 1}) {
      for (const char* key : kLayerKeys) {
        tensors.emplace_back(LayerName(layer, key), TensorOf(c["sources"][key]));
      }
    }
    if (g_world->rank() == 0) {
      ASSERT_TRUE(WriteSafetensors(file, tensors).ok());
      const absl::StatusOr<CheckpointSource> full = CheckpointSource::Open(file);
      ASSERT_TRUE(full.ok());
      ASSERT_TRUE(WriteShardedCheckpoint(
                      *full, std::make_shared<const DeviceMesh>(*DeviceMesh::Create({3})),
                      *ShardingPlan::Builtin("fsdp"), dir + "/fsdp3")
                      .ok());
    }
    ASSERT_TRUE(g_world->Barrier().ok());
    // The engine's tensors: what the map makes of the checkpoint's (the golden's fused
    // shapes), each placed by the layout; this rank lists those of its stage.
    std::vector<SafetensorsTensorSpec> sources;
    for (const auto& [n, t] : tensors) sources.push_back({n, t.dtype(), t.shape()});
    const auto parts = [tp](absl::string_view, const IntVector&, int dim) -> int64_t {
      return dim == 0 ? tp : 1;  // every fused tensor of vLLM's is Shard(0) over tp
    };
    absl::StatusOr<std::vector<SafetensorsTensorSpec>> engine_tensors =
        map->DestinationTensors(sources, parts);
    ASSERT_TRUE(engine_tensors.ok()) << engine_tensors.status();
    // The engine holds the golden's dtype (a case may cast).
    for (SafetensorsTensorSpec& t : *engine_tensors) {
      t.dtype = TensorOf(c["ranks"][0][KeyOf(t.name)]).dtype();
    }
    const int64_t stage = g_world->rank() / tp;
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank() % tp)];
    for (const std::string& src : {file, dir + "/fsdp3"}) {
      absl::StatusOr<Map> engine = layout->MetaStateDict(*engine_tensors, g_world->rank());
      ASSERT_TRUE(engine.ok()) << engine.status();
      // Stage 0: the embedding and layer 0's two fused tensors; stage 1: layer 1's, and the
      // embedding again: the model has no head of its own (tied, as vLLM keeps it there).
      ASSERT_EQ(engine->size(), 3u) << name;
      LoadOptions options;
      options.comm = g_world;
      options.read = ReadMode::kAll;
      options.weight_map = *map;
      options.strict = true;
      const absl::StatusOr<LoadResult> result =
          LoadStateDict(CheckpointSource::Open(src), *engine, options);
      ASSERT_TRUE(result.ok()) << name << " from " << src << ": " << result.status();
      EXPECT_TRUE(result->missing_keys.empty()) << name;
      for (size_t i = 0; i < engine->size(); ++i) {
        const std::string& path = engine->key(i);
        EXPECT_EQ(path.find(stage == 0 ? "layers.1." : "layers.0."), std::string::npos) << path;
        const DTensor& got = engine->value(i).as_dtensor();
        // Its stage's ranks only; the tied embedding both stages'.
        EXPECT_EQ(got.mesh()->num_ranks(), path == "model.embed_tokens.weight" ? 2 * tp : tp)
            << path;
        const Tensor want = TensorOf(mine[KeyOf(path)]);
        const Tensor dense = *got.local().Contiguous();
        ASSERT_EQ(dense.shape(), want.shape()) << name << " " << path;
        EXPECT_EQ(std::memcmp(dense.data_ptr(), want.data_ptr(), want.nbytes()), 0)
            << name << " " << path << " from " << src << " on rank " << g_world->rank();
      }
    }
    ASSERT_TRUE(g_world->Barrier().ok());
    if (g_world->rank() == 0) std::filesystem::remove_all(dir);
  }
  EXPECT_GT(ran, 0);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_weight_map_golden::g_world);
}
