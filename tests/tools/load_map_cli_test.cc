// `mpiexec -n N sdrt load SRC --mesh M --plan tp --map MAP [--cast D]` (issue 30): a
// checkpoint loaded straight into an engine's own layout (vLLM's fused qkv_proj and
// gate_up_proj, a padded vocabulary) from a safetensors file and from an sdrt sharded folder
// in another layout, with a built-in map, a MAP.json file and a cast, read by every rank or
// by rank 0 alone (--read root: no cast); each rank keeps only its pieces; `sdrt inspect
// --map` shows what each fused tensor is made of per rank. Bad
// maps and missing head sizes are exit 2 naming what is wrong.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::RunSdrt;
using test::RunSdrtMpi;
using ::testing::HasSubstr;

std::string Quote(const std::string& s) { return test::ShellQuote(s); }

class LoadMapCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(test::TestTmpRoot()) / absl::StrCat("load_map_cli_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    full_ = (dir_ / "full.safetensors").string();
    // tiny-llama: 4 query heads and 2 kv heads of 16, intermediate 172, vocabulary 256.
    ASSERT_EQ(RunSdrt(absl::StrCat("make ", Quote(full_), " --arch tiny-llama")).exit_code, 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json Load(int ranks, const std::string& src, const std::string& extra) {
    const CommandResult r =
        RunSdrtMpi(ranks, absl::StrCat("load ", Quote(src), " --mesh ", ranks,
                                       " --plan tp --json ", extra));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }

  fs::path dir_;
  std::string full_;
};

TEST_F(LoadMapCli, BuiltinMapFromAFileAndFromAShardedFolder) {
  // Two ranks, one kv head each: every rank keeps half of each cut tensor, the norms whole.
  const nlohmann::json one = Load(2, full_, "--map vllm-llama --head-size 16 --read all");
  ASSERT_TRUE(one.is_object());
  EXPECT_TRUE(one["verified_against"].is_null());
  EXPECT_TRUE(one["bit_exact"].is_null());
  const int64_t bytes = one["bytes"];
  const int64_t kept0 = one["bytes_kept"][0], kept1 = one["bytes_kept"][1];
  EXPECT_EQ(kept0, kept1);
  EXPECT_LT(kept0, bytes * 6 / 10);
  // Rank 0 alone reading (the others lower against the tensor list it sends): the same
  // pieces kept, the whole file read once.
  const nlohmann::json root = Load(2, full_, "--map vllm-llama --head-size 16 --read root");
  ASSERT_TRUE(root.is_object());
  EXPECT_EQ(root["read"], "root");
  EXPECT_EQ(root["bytes_kept"][0], kept0);
  EXPECT_EQ(root["bytes_kept"][1], kept1);
  EXPECT_EQ(root["bytes_read"][1], 0);
  // Four ranks: more ranks than kv heads, each kv head read by the two ranks that hold it.
  const nlohmann::json four = Load(4, full_, "--map vllm-llama --head-size 16 --read all");
  ASSERT_TRUE(four.is_object());
  EXPECT_EQ(four["tensors"], 21);
  // From a sharded folder in fsdp over 3 ranks, cast to float32 on the way.
  const std::string folder = (dir_ / "fsdp3").string();
  ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(full_), " ", Quote(folder),
                                 " --mesh 3 --plan fsdp"))
                .exit_code,
            0);
  const nlohmann::json sharded = Load(2, folder, "--map vllm-llama --head-size 16 --cast f32");
  ASSERT_TRUE(sharded.is_object());
  EXPECT_EQ(sharded["read"], "all");
  // float32 holds twice the bytes of the bfloat16 pieces a rank keeps.
  EXPECT_EQ(static_cast<int64_t>(sharded["bytes_kept"][0]), 2 * kept0);
}

TEST_F(LoadMapCli, MapFileAndItsErrors) {
  const std::string map = (dir_ / "map.json").string();
  std::ofstream(map) << R"({"rules": [{"rename": "model\\.layers\\.(\\d+)\\.self_attn\\.o_proj\\.weight",
                                        "to": "layers.{1}.attn.out.weight"}]})";
  EXPECT_TRUE(Load(2, full_, absl::StrCat("--map ", Quote(map))).is_object());
  // A built-in map without a head size (no config.json beside a file).
  CommandResult r = RunSdrtMpi(2, absl::StrCat("load ", Quote(full_),
                                               " --mesh 2 --plan tp --map vllm-llama"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--map vllm-llama needs --head-size"));
  EXPECT_THAT(r.err, HasSubstr("SRC has no config.json"));
  // A Hugging Face folder's config.json: not JSON, JSON without the sizes, then the sizes.
  const fs::path hf = dir_ / "hf";
  fs::create_directories(hf);
  fs::copy_file(full_, hf / "model.safetensors");
  const std::string load_hf =
      absl::StrCat("load ", Quote(hf.string()), " --mesh 2 --plan tp --map vllm-llama");
  std::ofstream(hf / "config.json") << "{\"hidden_size\": 64,";
  r = RunSdrtMpi(2, load_hf);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("config.json is not a JSON object"));
  std::ofstream(hf / "config.json") << R"({"model_type": "llama"})";
  r = RunSdrtMpi(2, load_hf);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("config.json gives neither head_dim nor hidden_size"));
  // A size given but not a positive whole number is named (null is as if left out).
  for (const char* head_dim : {"0", "-16", "\"16\"", "16.5"}) {
    std::ofstream(hf / "config.json")
        << absl::StrCat(R"({"hidden_size": 64, "num_attention_heads": 4, "head_dim": )", head_dim,
                        "}");
    r = RunSdrtMpi(2, load_hf);
    EXPECT_EQ(r.exit_code, 2) << head_dim;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat("\"head_dim\" is ", head_dim,
                                              "; a whole number in [1, 2^40] (or null)")));
    EXPECT_EQ(Load(2, hf.string(), "--map vllm-llama --head-size 16")["tensors"], 21)
        << "--head-size stands in for a config.json head_dim of " << head_dim;
  }
  std::ofstream(hf / "config.json")
      << R"({"hidden_size": 64, "num_attention_heads": 4, "head_dim": null})";
  EXPECT_EQ(Load(2, hf.string(), "--map vllm-llama")["tensors"], 21);
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(full_), " --mesh 2 --plan tp --map ''"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--map: empty: give vllm-llama, megatron-llama or a MAP.json"));
  // A map file that is not one, and a rule that cannot hold on 3 ranks.
  const std::string bad = (dir_ / "bad.json").string();
  std::ofstream(bad) << R"({"rules": [{"rename": "(", "to": "x"}]})";
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(full_), " --mesh 2 --plan tp --map ", Quote(bad)));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("weight map rule 0 (rename)"));
  r = RunSdrtMpi(3, absl::StrCat("load ", Quote(full_),
                                 " --mesh 3 --plan tp --map vllm-llama --head-size 16"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot be cut into 3 parts"));
  // The root sends the checkpoint's dtypes: a cast needs every rank reading (the library's
  // refusal, with or without a map).
  for (const char* map : {"--map vllm-llama --head-size 16 ", ""}) {
    r = RunSdrtMpi(2, absl::StrCat("load ", Quote(full_), " --mesh 2 --plan tp --read root ", map,
                                   "--cast f32"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("is float32 here but bfloat16 in the checkpoint: read kRoot "
                                 "sends the checkpoint's dtypes and casts nothing (read all"));
  }
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(full_), " --mesh 2 --plan tp --map ",
                                 Quote((dir_ / "missing.json").string())));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("neither a built-in map"));
}

// `--cast fp8-block|fp8-tensor`: the linear weights as float8_e4m3fn codes with their scales
// (the values are held to PyTorch's by fp8_map_mpi_test); a block that a rank's piece cuts is
// exit 2 naming the tensor, before any byte moves.
TEST_F(LoadMapCli, Fp8CastsWithScales) {
  // One scale per tensor: any cut, here the fused vLLM layout on 2 ranks.
  const nlohmann::json tensor =
      Load(2, full_, "--map vllm-llama --head-size 16 --read all --cast fp8-tensor");
  ASSERT_TRUE(tensor.is_object());
  EXPECT_EQ(tensor["tensors"], 21);
  // 15 engine tensors (q, k, v and gate, up fused in 2 layers) and the scales of 8 of them.
  EXPECT_EQ(tensor["engine_tensors"], 15 + 8);
  // Block scales on one rank: every weight whole, its ragged edge blocks included.
  EXPECT_TRUE(Load(1, full_, "--cast fp8-block").is_object());
  // On 2 ranks fsdp cuts the 64-row weights at row 32: inside a block.
  const CommandResult r = RunSdrtMpi(
      2, absl::StrCat("load ", Quote(full_), " --mesh 2 --plan fsdp --cast fp8-block"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("the block 128 x 128 does not fit"));
  EXPECT_THAT(r.err, HasSubstr("from [32, 0]"));
}

// An FP8 checkpoint (each linear weight's codes beside its block scales, as DeepSeek-V3's)
// loaded into a bfloat16 engine with `--cast bf16`: dequantized on the way, the scales not
// kept (the values are held to PyTorch's by fp8_map_mpi_test).
TEST_F(LoadMapCli, Fp8CheckpointDequantizedByACast) {
  const absl::StatusOr<CheckpointSource> full = CheckpointSource::Open(full_);
  ASSERT_TRUE(full.ok()) << full.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const CheckpointSourceTensor& t : full->tensors()) {
    absl::StatusOr<Tensor> x = full->Get(t.name);
    ASSERT_TRUE(x.ok()) << x.status();
    if (t.shape.size() != 2 || t.name.find("_proj.weight") == std::string::npos) {
      tensors.emplace_back(t.name, *x);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    Tensor codes = *Tensor::Empty({rows, cols}, DType::kFloat8E4M3FN);
    Tensor scales = *Tensor::Empty({(rows + 127) / 128, (cols + 127) / 128}, DType::kFloat32);
    const Tensor dense = *x->Contiguous();
    ASSERT_TRUE(internal::QuantizeMatrix(dense.data_ptr(), dense.dtype(), rows, cols, 128,
                                         codes.data_ptr(), DType::kFloat8E4M3FN,
                                         scales.data_ptr(), DType::kFloat32));
    tensors.emplace_back(t.name, codes);
    tensors.emplace_back(t.name + "_scale_inv", scales);
  }
  const std::string fp8 = (dir_ / "fp8.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(fp8, tensors).ok());
  const nlohmann::json loaded =
      Load(2, fp8, "--map vllm-llama --head-size 16 --read all --cast bf16");
  ASSERT_TRUE(loaded.is_object());
  EXPECT_EQ(loaded["tensors"], 21 + 14);  // the checkpoint's: 2 layers of 7 weights, their scales
}

// `sdrt inspect --map`: on 4 ranks, what rank 1's fused qkv_proj is made of: its query
// heads, then kv head 0, which rank 0 holds too (2 kv heads over 4 ranks).
TEST_F(LoadMapCli, InspectShowsWhatEachFusedTensorIsMadeOf) {
  const CommandResult r = RunSdrt(absl::StrCat("inspect ", Quote(full_),
                                               " --map vllm-llama --head-size 16 --mesh 4 "
                                               "--plan tp --json"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json listing = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(listing.is_array());
  const std::string qkv = "model.layers.0.self_attn.qkv_proj.weight";
  bool found = false;
  for (const nlohmann::json& t : listing) {
    if (t["tensor"] != qkv) continue;
    found = true;
    EXPECT_EQ(t["shape"], nlohmann::json({192, 64}));
    std::vector<std::string> rank1;
    for (const nlohmann::json& p : t["pieces"]) {
      if (p["rank"] != 1) continue;
      rank1.push_back(absl::StrCat(p["start"].get<int64_t>(), "+", p["length"].get<int64_t>(),
                                   "<-", p["source"].get<std::string>(), "@",
                                   p["source_start"].get<int64_t>()));
    }
    EXPECT_THAT(rank1, ::testing::ElementsAre(
                           "0+16<-model.layers.0.self_attn.q_proj.weight@16",
                           "16+16<-model.layers.0.self_attn.k_proj.weight@0",
                           "32+16<-model.layers.0.self_attn.v_proj.weight@0"));
  }
  EXPECT_TRUE(found) << r.out;
  const CommandResult no_mesh =
      RunSdrt(absl::StrCat("inspect ", Quote(full_), " --map vllm-llama --head-size 16"));
  EXPECT_EQ(no_mesh.exit_code, 2);
  EXPECT_THAT(no_mesh.err, HasSubstr("--map needs --mesh and --plan"));
}

}  // namespace
}  // namespace sdrt
