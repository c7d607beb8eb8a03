// FP8 destinations of a weight map (core/distributed/internal/mapping/quantize.h) against
// PyTorch: a Hugging Face Llama layer's bfloat16 weights, cut by an fsdp trainer (or read
// from a safetensors file), go into vLLM-style tensor-parallel FP8 buffers with the built-in
// map "vllm-llama": fused qkv_proj (kv heads replicated at tp 4) and gate_up_proj, o_proj
// and down_proj cut on dim 1, each with its scales beside it ("<name>_scale_inv": a float32
// or float8_e8m0fnu scale per 128 x 128 block of each source tensor; "<name>_scale": one
// per tensor). Every rank's codes and scales equal tests/data/fp8_map/expected.json (written
// by tests/golden/make_fp8_map_golden.py with PyTorch's ops) bit for bit, for the one-shot
// reshard, a bound plan run twice and a load. Pieces that cut a block are refused on every
// rank before any byte moves. CTest runs it under `mpiexec -n N`, N = 1..4: the cases whose
// tp is the world size.

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tests/core/distributed/fp8_map_test_util.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

using testing_fp8_map::Bf16Buffers;
using testing_fp8_map::Buffer;
using testing_fp8_map::CodesDType;
using testing_fp8_map::EngineBuffers;
using testing_fp8_map::ExpectBoundTwice;
using testing_fp8_map::ExpectDequantized;
using testing_fp8_map::ExpectGolden;
using testing_fp8_map::Fnv;
using testing_fp8_map::FsdpSources;
using testing_fp8_map::g_world;
using testing_fp8_map::Golden;
using testing_fp8_map::HfName;
using testing_fp8_map::kDestinations;
using testing_fp8_map::kOrder;
using testing_fp8_map::MapOptions;
using testing_fp8_map::Raw;
using testing_fp8_map::Sources;
using testing_fp8_map::World;

TEST(Fp8MapMpi, TheSourceFormulaIsTheGoldenScripts) {
  ASSERT_FALSE(Golden().is_null()) << "tests/data/fp8_map/expected.json";
  const std::map<std::string, Tensor> sources = Sources();
  for (const char* key : kOrder) {
    EXPECT_EQ(Fnv(sources.at(key)), Golden()["source_fnv"][key].get<std::string>()) << key;
  }
}

TEST(Fp8MapMpi, FsdpTrainerIntoFp8TensorParallelBuffersBitExact) {
  ASSERT_FALSE(Golden().is_null());
  const std::map<std::string, Tensor> sources = Sources();
  const Map trainer = FsdpSources(sources);
  int ran = 0;
  for (const json& c : Golden()["cases"]) {
    if (c["tp"] != g_world->size()) continue;
    ++ran;
    const std::string name = c["name"];
    Map engine = EngineBuffers(c);
    TransferStats stats;
    const absl::Status one_shot = ReshardStateDict(trainer, engine, MapOptions(), &stats);
    ASSERT_TRUE(one_shot.ok()) << name << ": " << one_shot;
    ExpectGolden(c, engine, "one-shot");
    // The senders quantize: the wire carries one byte per element, half of what the same
    // sync into bfloat16 buffers moves (the scales go by one all-reduce of block amaxes).
    Map bf16_engine;
    for (const char* key : kDestinations) {
      const Value* codes = engine.Find(HfName(key));
      const DTensor& d = codes->as_dtensor();
      bf16_engine.Set(HfName(key), Value(*DTensor::Make(*Tensor::Empty(d.local().shape(),
                                                                       DType::kBFloat16),
                                                        d.mesh(), d.placements(), d.global_shape())));
    }
    TransferStats bf16_stats;
    ASSERT_TRUE(ReshardStateDict(trainer, bf16_engine, MapOptions(), &bf16_stats).ok()) << name;
    EXPECT_EQ(2 * stats.wire_bytes, bf16_stats.wire_bytes) << name;
    // Every source of the four FP8 tensors is quantized by its senders: q, k, v, gate, up,
    // o, down; the bf16 sync casts nothing.
    EXPECT_EQ(stats.cast_by_senders, 7) << name;
    EXPECT_EQ(stats.cast_by_receivers, 0) << name;
    EXPECT_EQ(bf16_stats.cast_by_senders + bf16_stats.cast_by_receivers, 0) << name;
    if (g_world->size() > 1) {
      EXPECT_GT(stats.wire_bytes, 0) << name;
    }
    // Without a map: the leaves no rule touches (o_proj, down_proj) quantize all the same.
    Map plain = EngineBuffers(c);
    plain.EraseIf([](const std::string& path, const Value&) {
      return path.find("qkv_proj") != std::string::npos ||
             path.find("gate_up_proj") != std::string::npos;
    });
    ReshardOptions no_map;
    no_map.comm = g_world;
    ASSERT_TRUE(ReshardStateDict(trainer, plain, no_map).ok()) << name;
    {
      const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
      for (const char* key : {"o_proj", "down_proj"}) {
        EXPECT_EQ(Fnv(plain.Find(HfName(key))->as_dtensor().local()),
                  mine[key]["codes_fnv"].get<std::string>())
            << name << " without a map " << key;
      }
    }
    // A bound plan: the scales' grid kept, every step quantized afresh into the same buffers.
    const absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, engine, MapOptions());
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Tensor by tensor, the sources the senders quantize: q, k, v, gate, up, o, down.
    ASSERT_EQ(plan->casts().size(), 7u) << name;
    for (const PlannedCast& cast : plan->casts()) {
      EXPECT_TRUE(cast.by_senders) << name << " " << cast.path;
      EXPECT_EQ(cast.source, DType::kBFloat16) << cast.path;
      EXPECT_EQ(cast.destination, CodesDType(c)) << cast.path;
    }
    std::set<std::string> cast_paths, want_paths;
    for (const PlannedCast& cast : plan->casts()) cast_paths.insert(cast.path);
    for (const char* key : kOrder) want_paths.insert(HfName(key));
    EXPECT_EQ(cast_paths, want_paths) << name;
    ExpectBoundTwice(*plan, trainer, c, "bound");
  }
  if (g_world->size() != 3) {
    EXPECT_EQ(ran, 4);
  }
}

// A fresh folder made by rank 0, the same path on every rank ("" when it cannot be made).
std::string SharedTempDir() { return test::SharedTempDir(*g_world, "sdrt_fp8_"); }

// `file` opened on this rank: every rank for kAll, rank 0 alone for kRoot (the others as
// ranks that cannot see it).
absl::StatusOr<CheckpointSource> OpenOn(const std::string& file, ReadMode read) {
  if (read == ReadMode::kRoot && g_world->rank() != 0) {
    return absl::NotFoundError("not opened off rank 0");
  }
  return CheckpointSource::Open(file);
}

TEST(Fp8MapMpi, LoadAFileIntoFp8BuffersBitExact) {
  ASSERT_FALSE(Golden().is_null());
  const std::string dir = SharedTempDir();
  ASSERT_FALSE(dir.empty());
  if (g_world->rank() == 0) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [key, t] : Sources()) tensors.emplace_back(HfName(key), t);
    ASSERT_TRUE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  for (const json& c : Golden()["cases"]) {
    if (c["tp"] != g_world->size()) continue;
    // Every rank reading, and rank 0 alone (the others lower against the tensor list it
    // sends, and quantize what it sends them).
    for (const ReadMode read : {ReadMode::kAll, ReadMode::kRoot}) {
      Map engine = EngineBuffers(c);
      LoadOptions options;
      options.comm = g_world;
      options.read = read;
      options.weight_map = *WeightMap::Builtin("vllm-llama", 128);
      const absl::StatusOr<LoadResult> result =
          LoadStateDict(OpenOn(dir + "/model.safetensors", read), engine, options);
      ASSERT_TRUE(result.ok()) << c["name"] << ": " << result.status();
      EXPECT_TRUE(result->missing_keys.empty());
      EXPECT_TRUE(result->unexpected_keys.empty());
      ExpectGolden(c, engine, read == ReadMode::kAll ? "loaded" : "loaded by the root");
    }
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  if (g_world->rank() == 0) std::filesystem::remove_all(dir);
}

// The FP8 checkpoint of a dequant case: each source quantized by fp8_scale.h (its codes and
// scales checked against PyTorch's first), under the source's name and name + "_scale_inv"
// (block) or "_scale" (per tensor).
std::vector<std::pair<std::string, Tensor>> Fp8Checkpoint(const json& c) {
  const std::map<std::string, Tensor> sources = Sources();
  const int64_t tile = c["block"].get<int64_t>();
  const DType scale = c["scale_format"] == "e8m0" ? DType::kFloat8E8M0FNU : DType::kFloat32;
  std::vector<std::pair<std::string, Tensor>> out;
  for (const char* key : kOrder) {
    const Tensor& x = sources.at(key);
    const int64_t rows = x.size(0), cols = x.size(1);
    const IntVector grid = tile > 0 ? IntVector{(rows + tile - 1) / tile, (cols + tile - 1) / tile}
                                    : IntVector{1, 1};
    Tensor codes = *Tensor::Empty({rows, cols}, CodesDType(c));
    Tensor scales = *Tensor::Empty(grid, scale);
    EXPECT_TRUE(internal::QuantizeMatrix(x.data_ptr(), x.dtype(), rows, cols, tile,
                                         codes.data_ptr(), CodesDType(c), scales.data_ptr(),
                                         scale));
    const json& want = c["inputs"][key];
    EXPECT_EQ(Fnv(codes), want["codes_fnv"].get<std::string>()) << c["name"] << " " << key;
    EXPECT_EQ(Raw(scales), want["scales"].get<std::vector<int64_t>>()) << c["name"] << " " << key;
    out.emplace_back(HfName(key), codes);
    out.emplace_back(HfName(key) + (tile > 0 ? "_scale_inv" : "_scale"), scales);
  }
  return out;
}

// The trainer of an FP8 checkpoint: each tensor cut by fsdp (Shard(0)) over the world.
Map FsdpOf(const std::vector<std::pair<std::string, Tensor>>& checkpoint) {
  Map trainer;
  for (const auto& [path, t] : checkpoint) {
    trainer.Set(path, Value(*DistributeTensor(t, World(), *ParsePlacements("[S(0)]"),
                                              g_world->rank())));
  }
  return trainer;
}

// `checkpoint` written by rank 0 to `file`, then loaded into `into` with the vllm-llama
// map, read by every rank or (kRoot) by rank 0 alone.
absl::Status LoadFromAFile(const std::string& file,
                           const std::vector<std::pair<std::string, Tensor>>& checkpoint,
                           Map& into, ReadMode read) {
  absl::Status written = g_world->rank() == 0 ? WriteSafetensors(file, checkpoint)
                                              : absl::OkStatus();
  if (!written.ok()) return written;
  SDRT_RETURN_IF_ERROR(g_world->Barrier());
  LoadOptions options;
  options.comm = g_world;
  options.read = read;
  options.weight_map = *WeightMap::Builtin("vllm-llama", 128);
  return LoadStateDict(OpenOn(file, read), into, options).status();
}

TEST(Fp8MapMpi, DequantizeAnFp8CheckpointIntoBf16BuffersBitExact) {
  ASSERT_FALSE(Golden().is_null());
  const std::string dir = SharedTempDir();
  ASSERT_FALSE(dir.empty());
  int ran = 0;
  for (const json& c : Golden()["dequant_cases"]) {
    if (c["tp"] != g_world->size()) continue;
    ++ran;
    const std::string name = c["name"];
    const std::vector<std::pair<std::string, Tensor>> checkpoint = Fp8Checkpoint(c);
    // A trainer holding the FP8 codes and their scales cut by fsdp (a scale grid of 4 rows
    // over 4 ranks, or a single scale: uneven and empty pieces).
    const Map trainer = FsdpOf(checkpoint);
    Map engine = Bf16Buffers(c);
    TransferStats stats;
    const absl::Status synced = ReshardStateDict(trainer, engine, MapOptions(), &stats);
    ASSERT_TRUE(synced.ok()) << name << ": " << synced;
    ExpectDequantized(c, engine, "synced");
    // The codes moved as they are (one byte each), the receivers dequantize.
    EXPECT_EQ(stats.cast_by_senders + stats.cast_by_receivers, 0) << name;
    // Loaded from a file of the codes and scales, by every rank and by rank 0 alone.
    for (const ReadMode mode : {ReadMode::kAll, ReadMode::kRoot}) {
      Map loaded = Bf16Buffers(c);
      const absl::Status read = LoadFromAFile(absl::StrCat(dir, "/", name, ".safetensors"),
                                              checkpoint, loaded, mode);
      ASSERT_TRUE(read.ok()) << name << ": " << read;
      ExpectDequantized(c, loaded, mode == ReadMode::kAll ? "loaded" : "loaded by the root");
    }
  }
  if (g_world->size() != 3) {
    EXPECT_EQ(ran, 4);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  if (g_world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Fp8MapMpi, AnFp8CheckpointFusedWithItsScalesBitExact) {
  // An FP8 checkpoint (each Hugging Face tensor quantized alone, with its block scales) into
  // vLLM's fused FP8 buffers: the codes move as they are and the scales are fused like them.
  // Block scales are each source tensor's own, so the result is the quantize cases' exactly.
  ASSERT_FALSE(Golden().is_null());
  const std::string dir = SharedTempDir();
  ASSERT_FALSE(dir.empty());
  int ran = 0;
  for (const json& d : Golden()["dequant_cases"]) {
    if (d["tp"] != g_world->size()) continue;
    const std::string name = d["name"].get<std::string>().substr(std::string("dequant_").size());
    const json* c = nullptr;
    for (const json& q : Golden()["cases"]) {
      if (q["name"] == name) c = &q;
    }
    ASSERT_NE(c, nullptr) << name;
    const std::vector<std::pair<std::string, Tensor>> checkpoint = Fp8Checkpoint(d);
    const Map trainer = FsdpOf(checkpoint);
    Map engine = EngineBuffers(*c);
    TransferStats stats;
    const absl::Status synced = ReshardStateDict(trainer, engine, MapOptions(), &stats);
    if ((*c)["block"].get<int64_t>() == 0) {
      // One scale per tensor: q, k and v each have their own, which no one scale can hold.
      ASSERT_FALSE(synced.ok()) << name;
      EXPECT_EQ(synced.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(synced.message()), HasSubstr("give it block scales"));
      continue;
    }
    ++ran;
    ASSERT_TRUE(synced.ok()) << name << ": " << synced;
    ExpectGolden(*c, engine, "fused from FP8");
    EXPECT_EQ(stats.cast_by_senders + stats.cast_by_receivers, 0) << name;
    for (const ReadMode mode : {ReadMode::kAll, ReadMode::kRoot}) {
      Map loaded = EngineBuffers(*c);
      const absl::Status read = LoadFromAFile(absl::StrCat(dir, "/", name, ".safetensors"),
                                              checkpoint, loaded, mode);
      ASSERT_TRUE(read.ok()) << name << ": " << read;
      ExpectGolden(*c, loaded,
                   mode == ReadMode::kAll ? "loaded fused from FP8" : "loaded fused by the root");
    }
  }
  if (g_world->size() != 3) {
    EXPECT_EQ(ran, 3);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  if (g_world->rank() == 0) std::filesystem::remove_all(dir);
}

TEST(Fp8MapMpi, PiecesThatCutABlockAndWrongScalesFailOnEveryRank) {
  const std::map<std::string, Tensor> sources = Sources();
  const Map trainer = FsdpSources(sources);
  // o_proj's 512 columns over the ranks: on 3 ranks 171 | 171 | 170 cut blocks.
  const int64_t n = g_world->size();
  Map engine;
  Tensor local = *Tensor::Empty({300, 512 / n + (g_world->rank() < 512 % n ? 1 : 0)},
                                DType::kFloat8E4M3FN);
  engine.Set(HfName("o_proj"),
             Value(*DTensor::Make(local, World(), *ParsePlacements("[S(1)]"), {300, 512})));
  // Elsewhere whole blocks, but a scale local of [1, 1] where the blocks are [3, 4 / n].
  engine.Set(HfName("o_proj") + "_scale_inv",
             Buffer({n == 3 ? 3 : 1, 1}, DType::kFloat32, "[S(1)]", 1));
  const absl::Status status = ReshardStateDict(trainer, engine, MapOptions());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(n == 3 ? "does not fit: rank 1 holds 'model.layers.0.self_attn.o_proj.weight' from [0, 171]"
                                                 : absl::StrCat("the scales [3, ", 4 / n, "]")));
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::testing_fp8_map::g_world);
}
