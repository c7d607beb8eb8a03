// Weight maps through PlanReshard / ExecuteReshard / BindReshard (core/distributed/
// weight_map.h) against PyTorch: an fsdp trainer's Hugging Face Llama tensors go straight
// into vLLM-style tensor-parallel buffers (fused qkv_proj with grouped-query kv
// replication, fused gate_up_proj, a vocabulary padded to a multiple of 64 with zero rows;
// bfloat16, and float32 cast to bfloat16 on the way) with the built-in map "vllm-llama";
// Megatron's interleaved linear_qkv and [gate; up] linear_fc1, cut by fsdp through their
// groups, split into HF's tensors ("megatron-llama", its renames too) and fused back by a
// JSON map; the engine's fused buffers split back into HF's tensors (kv heads that several
// ranks hold replicated). Every
// local is compared bit for bit with tests/data/weight_map/expected.json (written by
// tests/golden/make_weight_map_golden.py with torch.cat / chunk / F.pad / .to()), also when
// loaded from a file and from an sdrt sharded folder with the map. CTest runs
// it under `mpiexec -n N`, N = 1..4 and 8: each vLLM case runs where its tp is the world.

#include <cstdint>
#include <filesystem>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
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
using testing_weight_map_golden::Piece;
using testing_weight_map_golden::TensorOf;
using testing_weight_map_golden::World;

constexpr int64_t kHeadSize = 4;

// A destination DTensor Shard(0) over the world whose rank-r local is `local_shape`: meta
// (`meta`) or allocated and filled with 0xFF bytes. Its rows are `rows`, or (-1) the
// local's times the ranks.
Value Buffer(const IntVector& local_shape, DType dtype, bool meta, int64_t rows = -1) {
  IntVector global = local_shape;
  global[0] = rows >= 0 ? rows : global[0] * g_world->size();
  Tensor local = meta ? *Tensor::Meta(local_shape, dtype) : *Tensor::Empty(local_shape, dtype);
  if (!meta && local.nbytes() > 0) std::memset(local.data_ptr(), 0xFF, local.nbytes());
  return Value(*DTensor::Make(local, World(), *ParsePlacements("[S(0)]"), global));
}

void ExpectBytes(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor dense = *got.Contiguous();
  EXPECT_EQ(std::memcmp(dense.data_ptr(), want.data_ptr(), want.nbytes()), 0)
      << what << " on rank " << g_world->rank();
}

const char* const kHf[] = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens"};

std::string HfName(const std::string& key) {
  if (key == "embed_tokens") return "model.embed_tokens.weight";
  const bool attn = key[1] == '_' || key == "qkv_proj";
  return absl::StrCat("model.layers.0.", attn ? "self_attn." : "mlp.", key, ".weight");
}

// The engine's buffers of vLLM case `c` on this rank (`mine`, its expected locals): the
// fused qkv_proj and gate_up_proj and the padded embedding, meta or allocated.
Map VllmBuffers(const json& c, const json& mine, bool meta) {
  Map engine;
  for (const char* key : {"qkv_proj", "gate_up_proj", "embed_tokens"}) {
    const Tensor want = TensorOf(mine[key]);
    const bool padded = std::string(key) == "embed_tokens";
    engine.Set(HfName(key), Buffer(want.shape(), want.dtype(), meta,
                                   padded ? c["embed_padded_rows"].get<int64_t>() : -1));
  }
  return engine;
}

// The trainer: every HF source cut by fsdp (Shard(0)) over the world, in `dtype`.
Map FsdpSources(const json& sources) {
  Map m;
  for (const char* key : kHf) m.Set(HfName(key), Piece(TensorOf(sources[key]), "[S(0)]"));
  return m;
}

// A bucket small enough that every sync takes many exchanges.
constexpr int64_t kBucketBytes = 512;

TEST(WeightMapMpi, VllmLlamaFromAnFsdpTrainerBitExact) {
  ASSERT_FALSE(Golden().is_null()) << "tests/data/weight_map/expected.json";
  const absl::StatusOr<WeightMap> map = WeightMap::Builtin("vllm-llama", kHeadSize);
  ASSERT_TRUE(map.ok()) << map.status();
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size()) continue;
    ++ran;
    const std::string name = c["name"];
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
    const Map trainer = FsdpSources(c["sources"]);
    for (bool meta : {true, false}) {
      Map engine = VllmBuffers(c, mine, meta);
      ReshardOptions options;
      options.comm = g_world;
      options.weight_map = *map;
      options.bucket_bytes = kBucketBytes;  // many buckets
      const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
      ASSERT_TRUE(plan.ok()) << name << ": " << plan.status();
      // Three components of qkv_proj, two of gate_up_proj, the embedding.
      EXPECT_EQ(plan->paths().size(), 6u) << name;
      TransferStats stats;
      if (meta) {
        ASSERT_TRUE(ExecuteReshard(*plan, trainer, engine, &stats).ok()) << name;
      } else {
        absl::StatusOr<BoundReshard> bound = BindReshard(*plan, trainer, engine);
        ASSERT_TRUE(bound.ok()) << name << ": " << bound.status();
        ASSERT_TRUE(bound->Execute(&stats).ok()) << name;
      }
      // The peak extra memory of the mapped sync: its three buckets, the fused tensors being
      // written in place through views (no full or component tensor is made).
      // (One rank copies its pieces locally, through no bucket.)
      if (g_world->size() > 1) {
        EXPECT_GT(stats.buffer_bytes, 0) << name;
      }
      EXPECT_LE(stats.buffer_bytes, 3 * kBucketBytes) << name;
      for (const char* key : {"qkv_proj", "gate_up_proj", "embed_tokens"}) {
        const Value* v = engine.Find(HfName(key));
        ASSERT_NE(v, nullptr);
        ExpectBytes(v->as_dtensor().local(), TensorOf(mine[key]),
                    absl::StrCat(name, " ", key, meta ? " (executed)" : " (bound)"));
      }
    }
  }
  if (g_world->size() != 5 && g_world->size() != 6 && g_world->size() != 7) {
    EXPECT_GT(ran, 0) << "no vLLM case for " << g_world->size() << " ranks";
  }
}

TEST(WeightMapMpi, VllmBuffersSplitBackIntoHfTensors) {
  ASSERT_FALSE(Golden().is_null());
  // The engine -> trainer direction: each rank's fused locals (the golden's) as the source,
  // replicated HF tensors as the destination; replicated kv heads are sent by one of the
  // ranks that hold them.
  const absl::StatusOr<WeightMap> map = WeightMap::FromJson(R"({"rules": [
    {"split": "model\\.layers\\.(\\d+)\\.self_attn\\.qkv_proj\\.weight",
     "to": ["model.layers.{1}.self_attn.q_proj.weight", "model.layers.{1}.self_attn.k_proj.weight",
            "model.layers.{1}.self_attn.v_proj.weight"], "head_size": 4},
    {"split": "model\\.layers\\.(\\d+)\\.mlp\\.gate_up_proj\\.weight",
     "to": ["model.layers.{1}.mlp.gate_proj.weight", "model.layers.{1}.mlp.up_proj.weight"]}]})");
  ASSERT_TRUE(map.ok()) << map.status();
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size() || c["source_dtype"] != c["dtype"]) {
      continue;
    }
    ++ran;
    const std::string name = c["name"];
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
    Map engine;
    for (const char* key : {"qkv_proj", "gate_up_proj"}) {
      const Tensor local = TensorOf(mine[key]);
      IntVector global = local.shape();
      global[0] *= g_world->size();
      engine.Set(HfName(key),
                 Value(*DTensor::Make(local, World(), *ParsePlacements("[S(0)]"), global)));
    }
    Map hf;
    for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
      const Tensor want = TensorOf(c["sources"][key]);
      hf.Set(HfName(key), Value(*DTensor::Make(*Tensor::Meta(want.shape(), want.dtype()), World(),
                                               *ParsePlacements("[R]"), want.shape())));
    }
    ReshardOptions options;
    options.comm = g_world;
    options.weight_map = *map;
    const absl::Status status = ReshardStateDict(engine, hf, options);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
      ExpectBytes(hf.Find(HfName(key))->as_dtensor().local(), TensorOf(c["sources"][key]),
                  absl::StrCat(name, " engine -> hf ", key));
    }
  }
  if (g_world->size() <= 4 || g_world->size() == 8) {
    EXPECT_GT(ran, 0);
  }
}

// A fresh folder made by rank 0, the same path on every rank (removed by RemoveShared).
std::string SharedTempDir() { return test::SharedTempDir(*g_world, "sdrt_map_"); }

TEST(WeightMapMpi, LoadAnHfFileStraightIntoVllmBuffers) {
  ASSERT_FALSE(Golden().is_null());
  const absl::StatusOr<WeightMap> map = WeightMap::Builtin("vllm-llama", kHeadSize);
  ASSERT_TRUE(map.ok());
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "vllm" || c["tp"] != g_world->size()) continue;
    const std::string name = c["name"];
    const std::string dir = SharedTempDir();
    ASSERT_FALSE(dir.empty());
    const std::string file = dir + "/model.safetensors";
    if (g_world->rank() == 0) {
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const char* key : kHf) tensors.emplace_back(HfName(key), TensorOf(c["sources"][key]));
      // A tensor no rule reads, loaded as it is.
      tensors.emplace_back("model.norm.weight", TensorOf(c["sources"]["gate_proj"]));
      ASSERT_TRUE(WriteSafetensors(file, tensors).ok());
      // The same checkpoint as an sdrt sharded folder, fsdp over 3 ranks.
      const absl::StatusOr<CheckpointSource> full = CheckpointSource::Open(file);
      ASSERT_TRUE(full.ok());
      ASSERT_TRUE(WriteShardedCheckpoint(*full,
                                         std::make_shared<const DeviceMesh>(
                                             *DeviceMesh::Create({3})),
                                         *ShardingPlan::Builtin("fsdp"), dir + "/fsdp3")
                      .ok());
    }
    ASSERT_TRUE(g_world->Barrier().ok());
    const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
    // The file read by every rank and by rank 0 alone (which sends the others its tensor
    // list to lower against, and their pieces), and the sharded folder.
    for (const auto& [src, read] :
         {std::pair(file, ReadMode::kAll), std::pair(file, ReadMode::kRoot),
          std::pair(dir + "/fsdp3", ReadMode::kAll)}) {
    for (bool meta : {true, false}) {
      Map engine = VllmBuffers(c, mine, meta);
      engine.Set("model.norm.weight", Value(int64_t{0}));  // replaced by the full tensor
      LoadOptions options;
      options.comm = g_world;
      options.read = read;
      options.weight_map = *map;
      LoadStats stats;
      options.stats = &stats;
      // With kRoot the other ranks' sources are not opened (as a rank that cannot see it).
      const absl::StatusOr<CheckpointSource> source =
          read == ReadMode::kRoot && g_world->rank() != 0
              ? absl::StatusOr<CheckpointSource>(absl::NotFoundError("not on this rank"))
              : CheckpointSource::Open(src);
      const absl::StatusOr<LoadResult> result = LoadStateDict(source, engine, options);
      const bool cast =
          TensorOf(c["sources"]["gate_proj"]).dtype() != TensorOf(mine["qkv_proj"]).dtype();
      if (read == ReadMode::kRoot && cast) {  // the root sends the checkpoint's dtypes
        EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << name;
        EXPECT_THAT(std::string(result.status().message()), ::testing::HasSubstr("casts nothing"))
            << name;
        continue;
      }
      ASSERT_TRUE(result.ok()) << name << ": " << result.status();
      EXPECT_TRUE(result->missing_keys.empty()) << name;
      EXPECT_TRUE(result->unexpected_keys.empty()) << name;
      for (const char* key : {"qkv_proj", "gate_up_proj", "embed_tokens"}) {
        ExpectBytes(engine.Find(HfName(key))->as_dtensor().local(), TensorOf(mine[key]),
                    absl::StrCat(name, " loaded ", key, " from ", src));
      }
      const Value* norm = engine.Find("model.norm.weight");
      ASSERT_NE(norm, nullptr);
      EXPECT_EQ(stats.read, read) << name;
      if (src == file) {
        ExpectBytes(norm->as_tensor(), TensorOf(c["sources"]["gate_proj"]),
                    name + " loaded model.norm.weight");
      }
      if (src == file && read == ReadMode::kAll) {
        // Each rank read only its own rows: its pieces of each source (the replicated kv
        // heads by each rank that holds them), never the whole checkpoint.
        EXPECT_LE(stats.bytes_kept, stats.bytes_read) << name;
      }
    }
    }
    ASSERT_TRUE(g_world->Barrier().ok());
    if (g_world->rank() == 0) std::filesystem::remove_all(dir);
  }
}

// The engine's tensor list a map makes from a checkpoint's (what `sdrt load --map`
// allocates): fused and padded shapes, and two rules making one name refused naming both.
TEST(WeightMapMpi, DestinationTensorsOfTheBuiltinMap) {
  const WeightMap map = *WeightMap::Builtin("vllm-llama", kHeadSize);
  std::vector<SafetensorsTensorSpec> specs = {
      {HfName("q_proj"), DType::kBFloat16, {24 * kHeadSize, 8}},
      {HfName("k_proj"), DType::kBFloat16, {2 * kHeadSize, 8}},
      {HfName("v_proj"), DType::kBFloat16, {2 * kHeadSize, 8}},
      {"model.embed_tokens.weight", DType::kBFloat16, {70, 8}}};
  const auto parts = [](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> {
    return 4;  // 4 ranks, 2 kv heads: each kv head on 2 of them
  };
  const absl::StatusOr<std::vector<SafetensorsTensorSpec>> out = map.DestinationTensors(specs, parts);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].name, HfName("qkv_proj"));
  EXPECT_EQ((*out)[0].shape, (IntVector{4 * (6 + 1 + 1) * kHeadSize, 8}));
  EXPECT_EQ((*out)[1].shape, (IntVector{128, 8}));
  // A source already named as the fused tensor: made twice.
  specs.push_back({HfName("qkv_proj"), DType::kBFloat16, {8, 8}});
  const absl::StatusOr<std::vector<SafetensorsTensorSpec>> twice =
      map.DestinationTensors(specs, parts);
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(twice.status().message(), HasSubstr("would be made twice: by rule 0"));
}

// Megatron-core's names for one layer's fused tensors and HF's for their components.
constexpr char kQkv[] = "decoder.layers.0.self_attention.linear_qkv.weight";
constexpr char kFc1[] = "decoder.layers.0.mlp.linear_fc1.weight";

TEST(WeightMapMpi, MegatronSplitIntoHfAndFusedBack) {
  ASSERT_FALSE(Golden().is_null());
  const absl::StatusOr<WeightMap> split = WeightMap::Builtin("megatron-llama", kHeadSize);
  ASSERT_TRUE(split.ok()) << split.status();
  const absl::StatusOr<WeightMap> fuse = WeightMap::FromJson(R"({"rules": [
    {"fuse": ["model\\.layers\\.(?P<i>\\d+)\\.self_attn\\.q_proj\\.weight",
              "model\\.layers\\.(?P<i>\\d+)\\.self_attn\\.k_proj\\.weight",
              "model\\.layers\\.(?P<i>\\d+)\\.self_attn\\.v_proj\\.weight"],
     "to": "decoder.layers.{i}.self_attention.linear_qkv.weight",
     "interleave": "groups", "head_size": 4},
    {"fuse": ["model\\.layers\\.(\\d+)\\.mlp\\.gate_proj\\.weight",
              "model\\.layers\\.(\\d+)\\.mlp\\.up_proj\\.weight"],
     "to": "decoder.layers.{1}.mlp.linear_fc1.weight", "interleave": "groups", "groups": 1}]})");
  ASSERT_TRUE(fuse.ok()) << fuse.status();
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["kind"] != "megatron") continue;
    ++ran;
    const std::string name = c["name"];
    const Tensor qkv = TensorOf(c["fused"]["linear_qkv"]);
    const Tensor fc1 = TensorOf(c["fused"]["linear_fc1"]);
    // Megatron -> HF: fsdp rows of the fused tensors (cutting through groups at 3 ranks)
    // into replicated HF tensors.
    Map megatron;
    megatron.Set(kQkv, Piece(qkv, "[S(0)]"));
    megatron.Set(kFc1, Piece(fc1, "[S(0)]"));
    // A renamed tensor: Megatron's linear_proj (here the gate's values) becomes HF's o_proj,
    // a plain tensor on every rank (the full tensor; in place on odd ranks).
    const Tensor proj = TensorOf(c["sources"]["gate_proj"]);
    megatron.Set("decoder.layers.0.self_attention.linear_proj.weight", Piece(proj, "[S(0)]"));
    Map hf;
    for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
      const Tensor want = TensorOf(c["sources"][key]);
      hf.Set(HfName(key), Value(*DTensor::Make(*Tensor::Meta(want.shape(), want.dtype()), World(),
                                               *ParsePlacements("[R]"), want.shape())));
    }
    Tensor in_place = *Tensor::Zeros(proj.shape(), proj.dtype());
    hf.Set("model.layers.0.self_attn.o_proj.weight",
           g_world->rank() % 2 == 1 ? Value(in_place) : Value(*Tensor::Zeros({1}, proj.dtype())));
    ReshardOptions options;
    options.comm = g_world;
    options.weight_map = *split;
    absl::Status status = ReshardStateDict(megatron, hf, options);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    const Value* o_proj = hf.Find("model.layers.0.self_attn.o_proj.weight");
    ASSERT_NE(o_proj, nullptr);
    ASSERT_EQ(o_proj->kind(), ValueKind::kTensor);
    ExpectBytes(o_proj->as_tensor(), proj, name + " renamed linear_proj");
    if (g_world->rank() % 2 == 1) ExpectBytes(in_place, proj, name + " linear_proj in place");
    for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
      ExpectBytes(hf.Find(HfName(key))->as_dtensor().local(), TensorOf(c["sources"][key]),
                  absl::StrCat(name, " megatron -> hf ", key));
    }
    // HF (fsdp) -> Megatron (fsdp rows of the interleaved tensors).
    const Map trainer = FsdpSources(c["sources"]);
    Map back;
    back.Set(kQkv, Value(*DTensor::Make(
                       *Tensor::Meta(*ComputeLocalShape(qkv.shape(), *World(),
                                                        *ParsePlacements("[S(0)]"),
                                                        g_world->rank()),
                                     qkv.dtype()),
                       World(), *ParsePlacements("[S(0)]"), qkv.shape())));
    back.Set(kFc1, Value(*DTensor::Make(
                       *Tensor::Meta(*ComputeLocalShape(fc1.shape(), *World(),
                                                        *ParsePlacements("[S(0)]"),
                                                        g_world->rank()),
                                     fc1.dtype()),
                       World(), *ParsePlacements("[S(0)]"), fc1.shape())));
    options.weight_map = *fuse;
    status = ReshardStateDict(trainer, back, options);
    ASSERT_TRUE(status.ok()) << name << ": " << status;
    ExpectBytes(back.Find(kQkv)->as_dtensor().local(), Piece(qkv, "[S(0)]").as_dtensor().local(),
                name + " hf -> megatron linear_qkv");
    ExpectBytes(back.Find(kFc1)->as_dtensor().local(), Piece(fc1, "[S(0)]").as_dtensor().local(),
                name + " hf -> megatron linear_fc1");
  }
  EXPECT_EQ(ran, 3);
}

TEST(WeightMapMpi, RulesThatCannotHoldFailOnEveryRankBeforeAnyByteMoves) {
  const int64_t n = g_world->size();
  const Tensor q = *Tensor::Zeros({8 * kHeadSize * n, 8}, DType::kBFloat16);
  const Tensor k = *Tensor::Zeros({kHeadSize, 8}, DType::kBFloat16);
  ReshardOptions options;
  options.comm = g_world;
  options.weight_map = *WeightMap::Builtin("vllm-llama", kHeadSize);
  // A fused destination whose parts are not the components' (q's rows per rank + 2 kv
  // heads would be needed; the buffer holds one row fewer).
  Map trainer;
  trainer.Set(HfName("q_proj"), Piece(q, "[S(0)]"));
  trainer.Set(HfName("k_proj"), Piece(k, "[R]"));
  trainer.Set(HfName("v_proj"), Piece(k, "[R]"));
  Map engine;
  engine.Set(HfName("qkv_proj"), Buffer({8 * kHeadSize + 2 * kHeadSize - 1, 8},
                                        DType::kBFloat16, true));
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("weight map rule 0 (fuse)"));
  EXPECT_THAT(plan.status().message(), HasSubstr("qkv_proj"));
  // A fuse missing its v component.
  Map no_v;
  no_v.Set(HfName("q_proj"), Piece(q, "[S(0)]"));
  no_v.Set(HfName("k_proj"), Piece(k, "[R]"));
  plan = PlanReshard(no_v, engine, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("no source matches its component 2"));
  // A template that makes a name longer than 64 KiB (a long capture repeated).
  {
    std::string to;
    for (int i = 0; i < 64; ++i) to += "{1}";
    WeightMapRule rename;
    rename.kind = WeightMapRule::Kind::kRename;
    rename.from = {"(.*)"};
    rename.to = {to};
    ReshardOptions long_names = options;
    long_names.weight_map = *WeightMap::FromRules({rename});
    Map one;
    one.Set(std::string(2000, 'x'), Piece(k, "[R]"));
    plan = PlanReshard(one, engine, long_names);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.status().message(), HasSubstr("makes a name of more than 65536 bytes"));
  }
  // A split none of whose destinations any rank holds is left out, as an unwanted source.
  {
    WeightMapRule split;
    split.kind = WeightMapRule::Kind::kSplit;
    split.from = {"fused"};
    split.to = {"a", "b"};
    ReshardOptions unwanted = options;
    unwanted.weight_map = *WeightMap::FromRules({split});
    Map source;
    source.Set("fused", Piece(q, "[S(0)]"));
    Map nothing;
    EXPECT_TRUE(PlanReshard(source, nothing, unwanted).ok());
  }
  // Ranks that describe a fused destination differently fail alike (the lowering reads
  // the first description; every other is checked against it).
  if (n > 1) {
    Map mixed;
    const int64_t rows = 8 * kHeadSize + 2 * kHeadSize;
    mixed.Set(HfName("qkv_proj"),
              g_world->rank() == 0
                  ? Buffer({rows, 8}, DType::kBFloat16, true)
                  : Value(*DTensor::Make(*Tensor::Meta({rows * n, 8}, DType::kBFloat16), World(),
                                         *ParsePlacements("[R]"), {rows * n, 8})));
    plan = PlanReshard(trainer, mixed, options);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.status().message(), HasSubstr("describe the destination of"));
  }
  if (n == 3) {
    // Two kv heads cannot be cut over three ranks, nor replicated onto them.
    const Tensor k2 = *Tensor::Zeros({2 * kHeadSize, 8}, DType::kBFloat16);
    Map two;
    two.Set(HfName("q_proj"), Piece(q, "[S(0)]"));
    two.Set(HfName("k_proj"), Piece(k2, "[R]"));
    two.Set(HfName("v_proj"), Piece(k2, "[R]"));
    Map fused;
    fused.Set(HfName("qkv_proj"), Buffer({8 * kHeadSize + 2 * kHeadSize, 8},
                                         DType::kBFloat16, true));
    plan = PlanReshard(two, fused, options);
    ASSERT_FALSE(plan.ok());
    EXPECT_THAT(plan.status().message(), HasSubstr("2 heads) cannot be cut into 3 parts"));
  }
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_weight_map_golden::g_world);
}
