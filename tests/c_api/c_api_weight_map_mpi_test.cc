// The C API's weight maps (sdrt_weight_map_t, included here from C++) under mpiexec -n 1 to
// 4 (2 and 4: kv heads of the fused buffers cut and replicated; 3: layers whose kv heads do
// not fit left out): an HF Llama-shaped file (c_api_llama_util.h) loaded with the built-in
// "vllm-llama" map into fused qkv_proj / gate_up_proj and padded buffers (checked against
// the rows each rank must hold), split back by a JSON map through a reshard plan that
// outlives its map; maps refused and loads whose map cannot hold, with their exact status
// codes and messages. The world comes from sdrt_comm_create_world (c_api_test_util.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/c_api.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tests/c_api/c_api_llama_util.h"
#include "sdrt/tests/c_api/c_api_test_util.h"

namespace {

using sdrt::testing_c_api::Buffer;
using sdrt::testing_c_api::g_rank;
using sdrt::testing_c_api::g_size;
using sdrt::testing_c_api::g_world;
using sdrt::testing_c_api::HfIndex;
using sdrt::testing_c_api::HfTensors;
using sdrt::testing_c_api::HfValue;
using sdrt::testing_c_api::kCols;
using sdrt::testing_c_api::kHeadSize;
using sdrt::testing_c_api::kLayers;
using sdrt::testing_c_api::kProjections;
using sdrt::testing_c_api::LayerFits;
using sdrt::testing_c_api::LayerName;
using sdrt::testing_c_api::LlamaPath;
using sdrt::testing_c_api::LoadOptions;
using sdrt::testing_c_api::MeshSpec;
using sdrt::testing_c_api::VllmEngine;

// A map handle from JSON text (nullptr, with the failure recorded, when refused).
sdrt_weight_map_t MapFromJson(const std::string& json) {
  sdrt_weight_map_t map = nullptr;
  EXPECT_EQ(sdrt_weight_map_from_json(json.data(), json.size(), &map), SDRT_OK)
      << sdrt_last_error();
  return map;
}

// The HF file into the vLLM engine's buffers with the built-in map: every rank's fused
// locals bit-exact, the padding zero, each rank reading only its own rows.
TEST(CApiWeightMap, LoadsAnHfFileIntoVllmBuffers) {
  sdrt_weight_map_t map = nullptr;
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  for (const int32_t read : {SDRT_READ_AUTO, SDRT_READ_ALL}) {
    VllmEngine engine;
    sdrt_load_options_t o = LoadOptions();
    int64_t missing = -1;
    int64_t unexpected = -1;
    o.read = read;
    o.num_missing = &missing;
    o.num_unexpected = &unexpected;
    o.weight_map = map;
    ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
    engine.ExpectLoaded();
    EXPECT_EQ(missing, 0);
    int64_t left_out = 0;  // the projections of layers whose kv heads do not fit
    for (int l = 0; l < kLayers; ++l) left_out += LayerFits(l) ? 0 : 5;
    EXPECT_EQ(unexpected, left_out);
    sdrt_stats_t stats = SDRT_STATS_INIT;
    ASSERT_SDRT_OK(sdrt_get_last_stats(&stats));
    int64_t kept = 0;
    for (const auto& e : engine.entries) {
      for (const auto& s : e.segments) kept += (s.end - s.begin) * kCols * 4;
    }
    EXPECT_EQ(stats.bytes_kept, kept);
    EXPECT_GE(stats.bytes_read, kept);
    // The buffers are the engine's own.
    for (size_t i = 0; i < engine.entries.size(); ++i) {
      const char* name = nullptr;
      const DLTensor* view = nullptr;
      ASSERT_SDRT_OK(sdrt_state_dict_get(engine.sd, static_cast<int64_t>(i), &name, &view,
                                         nullptr));
      EXPECT_EQ(view->data, engine.entries[i].buffer->data.data()) << name;
    }
  }
  // The options only borrowed the map: destroyed, a second load with a new one.
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  VllmEngine engine;
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = map;
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  // ... but it must be live during the call: the same error on every rank, before any
  // collective.
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, engine.sd, &o),
                    "options.weight_map is a weight map handle that was already "
                    "destroyed");
  sdrt_checkpoint_close(ckpt);
}

// The engine's fused buffers split back into HF tensors (replicated) by a JSON map with a
// rename, through a reshard plan: the map is destroyed right after the plan is made, and
// the plan is executed twice and bound.
TEST(CApiWeightMap, ReshardPlanSplitsAndRenamesWithoutItsMap) {
  VllmEngine engine;
  sdrt_weight_map_t load_map = nullptr;
  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &load_map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = load_map;
  ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
  sdrt_checkpoint_close(ckpt);
  sdrt_weight_map_destroy(load_map);

  // The trainer's side: every HF projection of the layers the engine holds, whole on
  // every rank (Replicate), and the norm renamed, plain.
  struct Hf {
    int tensor;
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<MeshSpec> spec;
  };
  std::vector<Hf> hf;
  sdrt_state_dict_t trainer = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&trainer));
  for (int l = 0; l < kLayers; ++l) {
    if (!LayerFits(l)) continue;
    for (const char* p : kProjections) {
      Hf h;
      h.tensor = HfIndex(LayerName(l, p));
      const int64_t rows = HfTensors()[h.tensor].rows;
      h.buffer = std::make_unique<Buffer>(rows, kCols, kCols);
      h.spec = std::make_unique<MeshSpec>("R", rows, kCols);
      ASSERT_SDRT_OK(sdrt_state_dict_add(trainer, LayerName(l, p).c_str(), &h.buffer->dl,
                                         &h.spec->spec));
      hf.push_back(std::move(h));
    }
  }
  Buffer norm(2, kCols, kCols);
  ASSERT_SDRT_OK(sdrt_state_dict_add(trainer, "final_norm.weight", &norm.dl, nullptr));
  const auto expect_trainer = [&](float scale) {
    for (const Hf& h : hf) {
      for (int64_t i = 0; i < h.buffer->shape[0]; ++i) {
        for (int64_t j = 0; j < kCols; ++j) {
          ASSERT_EQ(h.buffer->at(i, j), scale * HfValue(h.tensor, i, j))
              << "rank " << g_rank << " " << HfTensors()[h.tensor].name << " [" << i << ", "
              << j << "]";
        }
      }
    }
    const int t = HfIndex("model.norm.weight");
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < kCols; ++j) ASSERT_EQ(norm.at(i, j), scale * HfValue(t, i, j));
    }
  };

  sdrt_weight_map_t split = MapFromJson(R"({"rules": [
    {"split": "model\\.layers\\.(\\d+)\\.self_attn\\.qkv_proj\\.weight",
     "to": ["model.layers.{1}.self_attn.q_proj.weight", "model.layers.{1}.self_attn.k_proj.weight",
            "model.layers.{1}.self_attn.v_proj.weight"], "head_size": 2},
    {"split": "model\\.layers\\.(\\d+)\\.mlp\\.gate_up_proj\\.weight",
     "to": ["model.layers.{1}.mlp.gate_proj.weight", "model.layers.{1}.mlp.up_proj.weight"]},
    {"rename": "model\\.norm\\.weight", "to": "final_norm.weight"}]})");
  ASSERT_NE(split, nullptr);
  sdrt_reshard_options_t options = SDRT_RESHARD_OPTIONS_INIT;
  options.comm = g_world;
  options.timeout_seconds = 60;
  options.bucket_bytes = 128;
  options.weight_map = split;
  sdrt_reshard_plan_t plan = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_plan_create(engine.sd, trainer, &options, &plan));
  // The plan keeps what it needs of the map.
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(split));
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, engine.sd, trainer, nullptr));
  expect_trainer(1.0f);
  engine.Scale(2.0f);
  ASSERT_SDRT_OK(sdrt_reshard_execute(plan, engine.sd, trainer, nullptr));
  expect_trainer(2.0f);
  sdrt_reshard_bound_t bound = nullptr;
  ASSERT_SDRT_OK(sdrt_reshard_bind(plan, engine.sd, trainer, nullptr, &bound));
  engine.Scale(1.5f);
  ASSERT_SDRT_OK(sdrt_reshard_bound_execute(bound, nullptr));
  expect_trainer(3.0f);
  ASSERT_SDRT_OK(sdrt_reshard_bound_destroy(bound));
  ASSERT_SDRT_OK(sdrt_reshard_plan_destroy(plan));

  // Without the map the trainer's names are not the engine's: nothing holds q_proj.
  sdrt_reshard_plan_t unmapped = nullptr;
  options.weight_map = nullptr;
  EXPECT_SDRT(SDRT_INVALID_ARGUMENT,
              sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped));
  // A destroyed map, and a handle of another kind, refused on every rank.
  options.weight_map = split;
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped),
                    "options.weight_map is a weight map handle that "
                    "was already destroyed");
  options.weight_map = reinterpret_cast<sdrt_weight_map_t>(trainer);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_reshard_plan_create(engine.sd, trainer, &options, &unmapped),
                    "options.weight_map is a state dict handle, not a weight map");
  EXPECT_EQ(unmapped, nullptr);
  sdrt_state_dict_destroy(trainer);
}

// Maps that cannot be made, and loads whose map cannot hold: the rule is named, and a
// collective's error is every rank's.
// FP8 through the C API: an engine's float8_e4m3fn DLPack buffer of a gate_proj (12 x 3,
// rows cut over the ranks) beside a float32 "<name>_scale" of one element, filled by one
// sdrt_load with no map: the codes of each rank's rows with the scale of the whole tensor
// (amax / 448), as PyTorch's recipe (fp8_scale.h, held to it by its golden) makes them.
TEST(CApiWeightMap, LoadsFp8CodesAndTheirScale) {
  const std::string name = LayerName(0, "mlp.gate_proj");
  const int t = HfIndex(name);
  const int64_t rows = HfTensors()[t].rows;
  const auto [begin, end] = sdrt::testing_c_api::Chunk(rows, g_size, g_rank);
  std::vector<uint8_t> codes(static_cast<size_t>(std::max<int64_t>(1, (end - begin) * kCols)),
                             0xAA);
  int64_t codes_shape[2] = {end - begin, kCols};
  DLTensor dl;
  std::memset(&dl, 0, sizeof dl);
  dl.data = codes.data();
  dl.device.device_type = kDLCPU;
  dl.ndim = 2;
  dl.dtype.code = 10;  // kDLFloat8_e4m3fn (DLPack 1.1; the bundled header predates it)
  dl.dtype.bits = 8;
  dl.dtype.lanes = 1;
  dl.shape = codes_shape;
  Buffer scale(1, 1, 1);
  MeshSpec codes_spec("S(0)", rows, kCols);
  MeshSpec scale_spec("R", 1, 1);
  sdrt_state_dict_t sd = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&sd));
  ASSERT_SDRT_OK(sdrt_state_dict_add(sd, name.c_str(), &dl, &codes_spec.spec));
  ASSERT_SDRT_OK(sdrt_state_dict_add(sd, (name + "_scale").c_str(), &scale.dl, &scale_spec.spec));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  sdrt_load_options_t o = LoadOptions();
  o.strict = 0;  // the other tensors of the file are not this engine's
  ASSERT_SDRT_OK(sdrt_load(ckpt, sd, &o));
  float amax = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < kCols; ++j) amax = std::max(amax, std::fabs(HfValue(t, i, j)));
  }
  const float want_scale = amax / 448.0f;
  EXPECT_EQ(scale.at(0, 0), want_scale);
  for (int64_t i = begin; i < end; ++i) {
    for (int64_t j = 0; j < kCols; ++j) {
      EXPECT_EQ(codes[static_cast<size_t>((i - begin) * kCols + j)],
                sdrt::internal::FloatToFloat8E4M3FN(HfValue(t, i, j) / want_scale))
          << "row " << i << " col " << j << " on rank " << g_rank;
    }
  }
  sdrt_checkpoint_close(ckpt);
  sdrt_state_dict_destroy(sd);
}

TEST(CApiWeightMap, Errors) {
  sdrt_weight_map_t map = nullptr;
  // JSON that does not parse, a rule's pattern RE2 refuses, an unknown key, a split with
  // one template.
  const std::string garbage = R"({"rules": [)";
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_from_json(garbage.data(), garbage.size(), &map),
                    "sdrt_weight_map_from_json: weight map: ");
  const std::pair<std::string, const char*> bad_rules[] = {
      {R"({"rules": [{"rename": "a", "to": "b"}, {"rename": "(", "to": "c"}]})",
       "weight map rule 1 (rename): pattern '('"},
      {R"({"rules": [{"rename": "a", "to": "b", "dimension": 0}]})", "weight map rule 0"},
      {R"({"rules": [{"split": "a", "to": ["b"]}]})", "weight map rule 0 (split)"},
      {R"({"rules": [{"rename": "a", "to": "{i}"}]})", "weight map rule 0 (rename)"},
  };
  for (const auto& [json, text] : bad_rules) {
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                      sdrt_weight_map_from_json(json.data(), json.size(), &map), text);
  }
  EXPECT_EQ(map, nullptr);
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_from_json(nullptr, 4, &map),
                    "json is NULL");
  const std::string fine = R"({"rules": []})";
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_from_json(fine.data(), fine.size(), nullptr), "out is NULL");
  // Built-in maps: unknown names, bad head sizes, NULLs.
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-mixtral", 8, &map),
                    "no built-in weight map 'vllm-mixtral'");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-llama", -4, &map),
                    "head size -4");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin(nullptr, 8, &map),
                    "name is NULL");
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_builtin("vllm-llama", 8, nullptr),
                    "out is NULL");
  EXPECT_EQ(map, nullptr);
  // Destroyed: refused by a second destroy; of another kind, refused and not freed.
  ASSERT_SDRT_OK(sdrt_weight_map_from_json(fine.data(), fine.size(), &map));
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_weight_map_destroy(map),
                    "sdrt_weight_map_destroy: map is a weight map handle that was already "
                    "destroyed");
  sdrt_state_dict_t sd = nullptr;
  ASSERT_SDRT_OK(sdrt_state_dict_create(&sd));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_weight_map_destroy(reinterpret_cast<sdrt_weight_map_t>(sd)),
                    "map is a state dict handle, not a weight map");
  ASSERT_SDRT_OK(sdrt_state_dict_destroy(sd));
  EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT,
                    sdrt_state_dict_destroy(reinterpret_cast<sdrt_state_dict_t>(map)),
                    "state_dict is a destroyed weight map handle, not a state dict");

  ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", kHeadSize, &map));
  sdrt_checkpoint_t ckpt = nullptr;
  ASSERT_SDRT_OK(sdrt_checkpoint_open(LlamaPath().c_str(), &ckpt));
  sdrt_load_options_t o = LoadOptions();
  o.weight_map = map;
  {
    // qkv_proj buffers one row too long: the fuse cannot fill them, on every rank.
    VllmEngine wrong(/*bad_qkv_rows=*/1);
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, wrong.sd, &o),
                      "weight map rule 0 (fuse)");
    EXPECT_NE(std::strstr(sdrt_last_error(), "qkv_proj"), nullptr) << sdrt_last_error();
  }
  {
    // read ROOT: rank 0 sends the checkpoint's tensor list, every rank lowers its buffers
    // against it and rank 0's broadcast fills them.
    VllmEngine by_root;
    o.read = SDRT_READ_ROOT;
    ASSERT_SDRT_OK(sdrt_load(ckpt, by_root.sd, &o));
    by_root.ExpectLoaded();
    o.read = SDRT_READ_AUTO;
  }
  VllmEngine engine;
  // Ranks passing different maps (another head size): the same error on every rank.
  if (g_size > 1) {
    sdrt_weight_map_t other = nullptr;
    ASSERT_SDRT_OK(sdrt_weight_map_builtin("vllm-llama", 2 * kHeadSize, &other));
    o.weight_map = g_rank == 0 ? other : map;
    EXPECT_SDRT_ERROR(SDRT_INVALID_ARGUMENT, sdrt_load(ckpt, engine.sd, &o), "weight map");
    o.weight_map = map;
    ASSERT_SDRT_OK(sdrt_weight_map_destroy(other));
  }
  // The same engine loads once the options are right.
  ASSERT_SDRT_OK(sdrt_load(ckpt, engine.sd, &o));
  engine.ExpectLoaded();
  ASSERT_SDRT_OK(sdrt_weight_map_destroy(map));
  sdrt_checkpoint_close(ckpt);
}

}  // namespace

int main(int argc, char** argv) {
  return sdrt::testing_c_api::RunCApiMpiTests(argc, argv,
                                              sdrt::testing_c_api::WriteLlamaCheckpoint);
}
