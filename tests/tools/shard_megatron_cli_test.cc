// `sdrt shard SRC OUTDIR --mesh 2 --plan tp --map megatron-llama [--cast fp8-block]`: a
// Megatron checkpoint folder saved as Hugging Face tensors in the tp layout. The splits take
// their sizes from the folder's config.json, or without one from SRC's own shapes; from the
// golden's Megatron tensors (tests/data/weight_map) every piece equals PyTorch's; with
// --cast fp8-block the split's parts are FP8 with block scales, put together PyTorch's
// quantization of each Hugging Face tensor (tests/data/fp8_map's dequant cases' inputs);
// one scale per part is refused, exit 2.

#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/fp8_map_test_util.h"
#include "sdrt/tests/support/golden_codec.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"
#include "sdrt/tests/tools/shard_map_cli_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::RunSdrt;
using test::RunSdrtMpi;
using test_shard_map::Quote;
using test_shard_map::Rows;
using test_shard_map::TensorOf;
using ::testing::HasSubstr;

class ShardMegatronCli : public test_shard_map::FreshDirTest {};

TEST_F(ShardMegatronCli, AMegatronFolderIntoHuggingFaceTensorsByItsConfig) {
  // The golden's Megatron tensors (linear_qkv by query group, linear_fc1 [gate; up]) in a
  // folder whose config.json gives the heads and sizes: megatron-llama's splits take their
  // sizes from it, so the destinations are known from SRC alone.
  absl::StatusOr<json> golden = testing_golden::ReadGoldenJson("weight_map/expected.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  int ran = 0;
  for (const json& c : (*golden)["cases"]) {
    if (c["kind"] != "megatron") continue;
    ++ran;
    const std::string name = c["name"];
    const fs::path folder = dir_ / name;
    fs::create_directories(folder);
    const std::vector<std::pair<std::string, Tensor>> tensors = {
        {"decoder.layers.0.self_attention.linear_qkv.weight", TensorOf(c["fused"]["linear_qkv"])},
        {"decoder.layers.0.mlp.linear_fc1.weight", TensorOf(c["fused"]["linear_fc1"])}};
    ASSERT_TRUE(WriteSafetensors((folder / "model.safetensors").string(), tensors).ok());
    {
      std::ofstream config(folder / "config.json");
      config << json{{"hidden_size", (*golden)["hidden"]},
                     {"num_attention_heads", (*golden)["num_heads"]},
                     {"num_key_value_heads", c["num_kv_heads"]},
                     {"head_dim", (*golden)["head_size"]},
                     {"intermediate_size", (*golden)["intermediate"]}}.dump();
    }
    const std::string out = (dir_ / (name + "_tp2")).string();
    const test::CommandResult r =
        RunSdrt(absl::StrCat("shard ", Quote(folder.string()), " ", Quote(out),
                             " --mesh 2 --plan tp --map megatron-llama"));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    const std::shared_ptr<const DeviceMesh> mesh =
        std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}));
    for (int64_t rank = 0; rank < 2; ++rank) {
      absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
      ASSERT_TRUE(shards.ok()) << shards.status();
      ASSERT_EQ(shards->tensors.size(), 5u) << name;
      for (const auto& [path, got] : shards->tensors) {
        const std::string stem = path.substr(0, path.size() - std::string(".weight").size());
        const Tensor full = TensorOf(c["sources"][stem.substr(stem.rfind('.') + 1)]);
        const DTensor want = *DistributeTensor(full, mesh, got.placements(), rank);
        EXPECT_EQ(testing_fp8_map::Fnv(got.local()), testing_fp8_map::Fnv(want.local()))
            << name << " " << path << " rank " << rank;
      }
    }
  }
  EXPECT_EQ(ran, 3);
}

TEST_F(ShardMegatronCli, AMegatronFolderIntoFp8HuggingFaceTensors) {
  // megatron-llama with --cast fp8-block: the splits' parts are FP8 with block scales, the
  // blocks of linear_qkv and linear_fc1 being each part's own (heads of 128 rows), so the
  // parts put together are PyTorch's quantization of each Hugging Face tensor (the FP8
  // golden's dequant cases' inputs).
  ASSERT_FALSE(testing_fp8_map::Golden().is_null());
  const fs::path folder = dir_ / "megatron";
  fs::create_directories(folder);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : testing_fp8_map::MegatronSources()) {
    tensors.emplace_back("decoder.layers.0." + name, t);
  }
  ASSERT_TRUE(WriteSafetensors((folder / "model.safetensors").string(), tensors).ok());
  {
    std::ofstream config(folder / "config.json");
    config << json{{"hidden_size", 300}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                   {"head_dim", 128}, {"intermediate_size", 512}}.dump();
  }
  const std::string out = (dir_ / "fp8_tp2").string();
  const test::CommandResult r =
      RunSdrt(absl::StrCat("shard ", Quote(folder.string()), " ", Quote(out),
                           " --mesh 2 --plan tp --map megatron-llama --cast fp8-block"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::map<std::string, std::vector<Tensor>> pieces;
  for (int64_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
    ASSERT_TRUE(shards.ok()) << shards.status();
    for (const auto& [path, d] : shards->tensors) pieces[path].push_back(d.local());
  }
  const json* c = nullptr;
  for (const json& d : testing_fp8_map::Golden()["dequant_cases"]) {
    if (d["tp"] == 1 && d["block"] == 128 && d["scale_format"] == "f32" && d["fp8"] == "e4m3fn") {
      c = &d;
    }
  }
  ASSERT_NE(c, nullptr);
  // q, k, v, gate and up: cut by rows (dim 0) on both ranks, with their block scales.
  for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}) {
    const std::string name = testing_fp8_map::HfName(key);
    ASSERT_EQ(pieces[name].size(), 2u) << key;
    ASSERT_EQ(pieces[name + "_scale_inv"].size(), 2u) << key;
    EXPECT_EQ(pieces[name][0].dtype(), DType::kFloat8E4M3FN) << key;
    EXPECT_EQ(testing_fp8_map::Fnv(Rows(pieces[name])),
              (*c)["inputs"][key]["codes_fnv"].get<std::string>())
        << key;
    EXPECT_EQ(testing_fp8_map::Raw(Rows(pieces[name + "_scale_inv"])),
              (*c)["inputs"][key]["scales"].get<std::vector<int64_t>>())
        << key;
  }
  // sdrt gather checks every full hash of the index against the pieces.
  const test::CommandResult g = RunSdrtMpi(
      2, absl::StrCat("gather ", Quote(out), " ", Quote((dir_ / "gathered.safetensors").string())));
  EXPECT_EQ(g.exit_code, 0) << g.err;
  // One scale per part of a split is refused (its scales are blocks of its source), exit 2.
  const test::CommandResult t =
      RunSdrt(absl::StrCat("shard ", Quote(folder.string()), " ",
                           Quote((dir_ / "per_tensor").string()),
                           " --mesh 2 --plan tp --map megatron-llama --cast fp8-tensor"));
  EXPECT_EQ(t.exit_code, 2);
  EXPECT_THAT(t.err, HasSubstr("are parts of one split"));
  EXPECT_FALSE(fs::exists(dir_ / "per_tensor"));
  // Without config.json (the head size given): the splits' sizes from the tensors' shapes
  // (linear_proj's columns are q's rows), the same folder.
  fs::remove(folder / "config.json");
  const std::string bare = (dir_ / "fp8_tp2_bare").string();
  const test::CommandResult b =
      RunSdrt(absl::StrCat("shard ", Quote(folder.string()), " ", Quote(bare),
                           " --mesh 2 --plan tp --map megatron-llama --head-size 128"
                           " --cast fp8-block"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  for (int64_t rank = 0; rank < 2; ++rank) {
    absl::StatusOr<RankShards> with = LoadRankShards(out, rank);
    absl::StatusOr<RankShards> without = LoadRankShards(bare, rank);
    ASSERT_TRUE(with.ok() && without.ok());
    ASSERT_EQ(with->tensors.size(), without->tensors.size());
    for (size_t i = 0; i < with->tensors.size(); ++i) {
      EXPECT_EQ(with->tensors[i].first, without->tensors[i].first);
      EXPECT_EQ(testing_fp8_map::Fnv(with->tensors[i].second.local()),
                testing_fp8_map::Fnv(without->tensors[i].second.local()))
          << with->tensors[i].first;
    }
  }
}

}  // namespace
}  // namespace sdrt
