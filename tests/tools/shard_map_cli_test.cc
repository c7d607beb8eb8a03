// `sdrt shard SRC OUTDIR --mesh N --plan tp --map MAP [--cast D]` (issue 30): an engine's own
// layout saved as a sharded folder. From the Hugging Face tensors of tests/data/weight_map's
// vLLM cases (tp 1, 2, 3, 4, 8; 1, 2 or 8 kv heads; float32 cast to bfloat16), every rank
// file's qkv_proj, gate_up_proj and padded embed_tokens equal PyTorch's layouts bit for bit,
// and the index's full-tensor hash is that of the ranks' pieces put together (so `sdrt
// gather` checks it); from tests/data/fp8_map's layer, --cast fp8-block writes the FP8 codes
// and block scales PyTorch's recipe makes (tp 1, 2, 4), --cast fp8-tensor the codes and one
// scale of each whole tensor (Megatron folders: shard_megatron_cli_test.cc).
// `mpiexec -n 3 sdrt reshard FSDP OUTDIR ... --map` writes the same folder, byte for byte. An
// FP8 checkpoint goes into the fused FP8 layout with its block scales fused like its codes.

#include <filesystem>
#include <fstream>
#include <memory>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
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
using ::testing::HasSubstr;
using test_shard_map::HfName;
using test_shard_map::Quote;
using test_shard_map::Rows;
using test_shard_map::TensorOf;

// A rank file's FP8 codes and scales (block scales, "_scale_inv", or one per tensor,
// "_scale") of the four linear weights against the golden's rank `mine`.
void ExpectFp8Rank(const RankShards& shards, const json& mine, const std::string& what,
                   const std::string& suffix = "_scale_inv") {
  std::map<std::string, const DTensor*> by_name;
  for (const auto& [path, d] : shards.tensors) by_name[path] = &d;
  for (const char* key : testing_fp8_map::kDestinations) {
    const std::string where = absl::StrCat(what, " ", key);
    ASSERT_TRUE(by_name.count(HfName(key)) && by_name.count(HfName(key) + suffix)) << where;
    EXPECT_EQ(testing_fp8_map::Fnv(by_name[HfName(key)]->local()),
              mine[key]["codes_fnv"].get<std::string>())
        << where;
    EXPECT_EQ(testing_fp8_map::Raw(by_name[HfName(key) + suffix]->local()),
              mine[key]["scales"].get<std::vector<int64_t>>())
        << where;
  }
}

class ShardMapCli : public test_shard_map::FreshDirTest {
 protected:
  // The fp8 golden's layer (its HF names) as dir_/layer.safetensors; its path.
  std::string WriteLayer() {
    const std::string file = (dir_ / "layer.safetensors").string();
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [key, t] : testing_fp8_map::Sources()) tensors.emplace_back(HfName(key), t);
    EXPECT_TRUE(WriteSafetensors(file, tensors).ok());
    return file;
  }
};

TEST_F(ShardMapCli, VllmLayoutsOfEveryGoldenCase) {
  absl::StatusOr<json> golden = testing_golden::ReadGoldenJson("weight_map/expected.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  int ran = 0;
  for (const json& c : (*golden)["cases"]) {
    if (c["kind"] != "vllm") continue;
    ++ran;
    const std::string name = c["name"];
    const int64_t tp = c["tp"];
    const std::string file = (dir_ / (name + ".safetensors")).string();
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const char* key : {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens"}) {
      tensors.emplace_back(HfName(key), TensorOf(c["sources"][key]));
    }
    ASSERT_TRUE(WriteSafetensors(file, tensors).ok());
    const std::string out = (dir_ / name).string();
    const bool cast = c["source_dtype"] != c["dtype"];
    const test::CommandResult r =
        RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(out), " --mesh ", tp,
                             " --plan tp --map vllm-llama --head-size 4", cast ? " --cast bf16" : ""));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    std::map<std::string, std::vector<Tensor>> pieces;
    for (int64_t rank = 0; rank < tp; ++rank) {
      absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
      ASSERT_TRUE(shards.ok()) << name << ": " << shards.status();
      const json& mine = c["ranks"][static_cast<size_t>(rank)];
      ASSERT_EQ(shards->tensors.size(), 3u) << name;
      for (const char* key : {"qkv_proj", "gate_up_proj", "embed_tokens"}) {
        const DTensor* got = nullptr;
        for (const auto& [path, d] : shards->tensors) {
          if (path == HfName(key)) got = &d;
        }
        ASSERT_NE(got, nullptr) << name << " " << key;
        const Tensor want = TensorOf(mine[key]);
        const Tensor local = *got->local().Contiguous();
        ASSERT_EQ(local.shape(), want.shape()) << name << " " << key << " rank " << rank;
        ASSERT_EQ(local.dtype(), want.dtype()) << name << " " << key;
        EXPECT_EQ(std::memcmp(local.data_ptr(), want.data_ptr(), want.nbytes()), 0)
            << name << " " << key << " rank " << rank;
        pieces[key].push_back(want);
      }
    }
    // The index's hash is the full tensor's: the golden's pieces one after another.
    const absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(out);
    ASSERT_TRUE(index.ok()) << index.status();
    for (const auto& [key, list] : pieces) {
      const ShardedCheckpointTensor* t = index->Find(HfName(key));
      ASSERT_NE(t, nullptr) << key;
      EXPECT_EQ(t->xxh64, *TensorXxh64(Rows(list))) << name << " " << key;
    }
    if (tp == 2 && !cast) {
      // A gather of the folder checks every tensor against those hashes.
      const test::CommandResult g = RunSdrtMpi(
          2, absl::StrCat("gather ", Quote(out), " ", Quote(out + ".full.safetensors")));
      EXPECT_EQ(g.exit_code, 0) << g.err;
      EXPECT_THAT(g.out, HasSubstr("every tensor matches the index's xxh64"));
    }
  }
  EXPECT_EQ(ran, 15);
}

TEST_F(ShardMapCli, Fp8BlockCodesAndScalesOfTheGolden) {
  ASSERT_FALSE(testing_fp8_map::Golden().is_null()) << "tests/data/fp8_map/expected.json";
  const std::string file = WriteLayer();
  int ran = 0;
  for (const json& c : testing_fp8_map::Golden()["cases"]) {
    if (c["scale_format"] != "f32" || c["fp8"] != "e4m3fn") continue;
    ++ran;
    const bool block = c["block"].get<int64_t>() > 0;
    const int64_t tp = c["tp"];
    const std::string out = (dir_ / absl::StrCat(block ? "block" : "tensor", "_tp", tp)).string();
    const test::CommandResult r = RunSdrt(
        absl::StrCat("shard ", Quote(file), " ", Quote(out), " --mesh ", tp,
                     " --plan tp --map vllm-llama --head-size 128 --cast ",
                     block ? "fp8-block" : "fp8-tensor"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int64_t rank = 0; rank < tp; ++rank) {
      absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
      ASSERT_TRUE(shards.ok()) << shards.status();
      ExpectFp8Rank(*shards, c["ranks"][static_cast<size_t>(rank)],
                    absl::StrCat(c["name"].get<std::string>(), " rank ", rank),
                    block ? "_scale_inv" : "_scale");
    }
    // One scale per tensor: the whole tensor's, which the index's hash checks too.
    if (!block && tp > 1) {
      const test::CommandResult g = RunSdrtMpi(
          tp, absl::StrCat("gather ", Quote(out), " ", Quote(out + ".safetensors")));
      EXPECT_EQ(g.exit_code, 0) << g.err;
    }
  }
  EXPECT_EQ(ran, 6);
}

TEST_F(ShardMapCli, AnFp8CheckpointIntoFusedFp8Buffers) {
  // An FP8 checkpoint of the golden's layer (every linear weight quantized alone with its
  // 128 x 128 block scales: the one rank file of `--mesh 1 --cast fp8-block`) sharded into
  // vLLM's layout: the fused qkv_proj and gate_up_proj get their components' codes as they
  // are and their scales fused like them, which is what quantizing the fused layout gives.
  const std::string file = WriteLayer();
  const fs::path fp8 = dir_ / "fp8";
  test::CommandResult r = RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(fp8.string()),
                                               " --mesh 1 --plan tp --cast fp8-block"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string checkpoint = (fp8 / "rank-00000-of-00001.safetensors").string();
  int ran = 0;
  for (const json& c : testing_fp8_map::Golden()["cases"]) {
    if (c["block"].get<int64_t>() == 0 || c["scale_format"] != "f32" || c["fp8"] != "e4m3fn" ||
        c["tp"] == 1) {
      continue;
    }
    ++ran;
    const int64_t tp = c["tp"];
    const std::string out = (dir_ / absl::StrCat("fused_tp", tp)).string();
    r = RunSdrt(absl::StrCat("shard ", Quote(checkpoint), " ", Quote(out), " --mesh ", tp,
                             " --plan tp --map vllm-llama --head-size 128"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int64_t rank = 0; rank < tp; ++rank) {
      absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
      ASSERT_TRUE(shards.ok()) << shards.status();
      ASSERT_EQ(shards->tensors.size(), 8u);
      ExpectFp8Rank(*shards, c["ranks"][static_cast<size_t>(rank)],
                    absl::StrCat("tp ", tp, " rank ", rank));
    }
  }
  EXPECT_EQ(ran, 2);
  // The same checkpoint dequantized into bfloat16 buffers (--cast bf16): PyTorch's
  // (q.float() * scale).to(bfloat16) in vLLM's layout; the scales are not kept.
  ran = 0;
  for (const json& d : testing_fp8_map::Golden()["dequant_cases"]) {
    if (d["name"] != "dequant_block_f32_tp2" && d["name"] != "dequant_block_f32_tp4") continue;
    ++ran;
    const int64_t tp = d["tp"];
    const std::string out = (dir_ / absl::StrCat("bf16_tp", tp)).string();
    r = RunSdrt(absl::StrCat("shard ", Quote(checkpoint), " ", Quote(out), " --mesh ", tp,
                             " --plan tp --map vllm-llama --head-size 128 --cast bf16"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (int64_t rank = 0; rank < tp; ++rank) {
      absl::StatusOr<RankShards> shards = LoadRankShards(out, rank);
      ASSERT_TRUE(shards.ok()) << shards.status();
      ASSERT_EQ(shards->tensors.size(), 4u);
      for (const auto& [path, t] : shards->tensors) {
        // "model.layers.0.self_attn.qkv_proj.weight" -> "qkv_proj"
        const std::string stem = path.substr(0, path.size() - std::string(".weight").size());
        const std::string key = stem.substr(stem.rfind('.') + 1);
        EXPECT_EQ(testing_fp8_map::Fnv(t.local()),
                  d["ranks"][static_cast<size_t>(rank)][key]["values_fnv"].get<std::string>())
            << "tp " << tp << " rank " << rank << " " << path;
      }
    }
  }
  EXPECT_EQ(ran, 2);
}

// Every file of the two folders byte for byte the same.
void ExpectSameFolders(const fs::path& a, const fs::path& b) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(a)) names.push_back(entry.path().filename());
  ASSERT_EQ(names.size(), static_cast<size_t>(std::distance(fs::directory_iterator(b),
                                                            fs::directory_iterator())));
  for (const std::string& name : names) {
    EXPECT_EQ(test::ReadFileText((a / name).string()), test::ReadFileText((b / name).string()))
        << name;
  }
}

TEST_F(ShardMapCli, ReshardWithAMapWritesWhatShardWrites) {
  // The fp8 golden's layer: an fsdp folder over 3 ranks resharded peer to peer into vLLM's
  // layout on 2 (bfloat16, and FP8 with block scales quantized by the senders) equals the
  // folder `sdrt shard --map` writes from the full file, which equals PyTorch's (above).
  const std::string file = WriteLayer();
  const std::string fsdp = (dir_ / "fsdp3").string();
  ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(fsdp), " --mesh 3 --plan fsdp"))
                .exit_code,
            0);
  for (const char* cast : {"", " --cast fp8-block"}) {
    const std::string engine = absl::StrCat(" --mesh 2 --plan tp --map vllm-llama --head-size 128",
                                            cast);
    const fs::path shard = dir_ / absl::StrCat("shard", cast[0] ? "_fp8" : "");
    const fs::path reshard = dir_ / absl::StrCat("reshard", cast[0] ? "_fp8" : "");
    const test::CommandResult s =
        RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(shard.string()), engine));
    ASSERT_EQ(s.exit_code, 0) << s.err;
    const test::CommandResult r = RunSdrtMpi(
        3, absl::StrCat("reshard ", Quote(fsdp), " ", Quote(reshard.string()), engine));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ExpectSameFolders(shard, reshard);
  }
  // One scale per tensor, which the reshard's senders agree on: a folder gather checks.
  const std::string tensor = (dir_ / "tensor").string();
  const test::CommandResult r = RunSdrtMpi(
      3, absl::StrCat("reshard ", Quote(fsdp), " ", Quote(tensor),
                      " --mesh 2 --plan tp --map vllm-llama --head-size 128 --cast fp8-tensor"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const test::CommandResult g =
      RunSdrtMpi(2, absl::StrCat("gather ", Quote(tensor), " ", Quote(tensor + ".safetensors")));
  EXPECT_EQ(g.exit_code, 0) << g.err;
  EXPECT_THAT(g.out, HasSubstr("every tensor matches the index's xxh64"));
}

TEST_F(ShardMapCli, AnEngineLayoutIsReadOnItsOwnLayoutAlone) {
  // vLLM's fused qkv_proj on 2 ranks holds each rank's q, k and v one after another: cut
  // for 3 ranks it would mix heads. The folder records its layout; every reader of another
  // layout refuses it, its gathered file too.
  const std::string file = WriteLayer();
  const std::string engine = (dir_ / "engine2").string();
  test::CommandResult r =
      RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(engine),
                           " --mesh 2 --plan tp --map vllm-llama --head-size 128"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string refused = "holds an engine's layout for --mesh 2 --plan tp";
  r = RunSdrtMpi(3, absl::StrCat("reshard ", Quote(engine), " ", Quote((dir_ / "r3").string()),
                                 " --mesh 3 --plan tp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(refused));
  EXPECT_FALSE(fs::exists(dir_ / "r3"));
  r = RunSdrtMpi(3, absl::StrCat("load ", Quote(engine), " --mesh 3 --plan tp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(refused));
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(engine), " --mesh 2 --plan fsdp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(engine), " --mesh 2 --plan tp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A rank file read as a checkpoint of its own carries the record too.
  r = RunSdrtMpi(3, absl::StrCat("load ", Quote(engine + "/rank-00000-of-00002.safetensors"),
                                 " --mesh 3 --plan tp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(refused));
  const std::string gathered = (dir_ / "engine2.safetensors").string();
  r = RunSdrtMpi(2, absl::StrCat("gather ", Quote(engine), " ", Quote(gathered)));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunSdrt(absl::StrCat("shard ", Quote(gathered), " ", Quote((dir_ / "s3").string()),
                           " --mesh 3 --plan tp"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr(refused));
  r = RunSdrt(absl::StrCat("shard ", Quote(gathered), " ", Quote((dir_ / "s2").string()),
                           " --mesh 2 --plan tp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A cast alone changes no tensor's layout: read anywhere.
  const std::string cast = (dir_ / "cast2").string();
  ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(cast),
                                 " --mesh 2 --plan tp --cast f16"))
                .exit_code,
            0);
  r = RunSdrtMpi(3, absl::StrCat("load ", Quote(cast), " --mesh 3 --plan fsdp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // A folder the map did not change records nothing: fsdp on 3 ranks reads anywhere.
  const std::string fsdp = (dir_ / "fsdp3").string();
  ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(fsdp), " --mesh 3 --plan fsdp"))
                .exit_code,
            0);
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(fsdp), " --mesh 2 --plan tp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// A PLAN.json layout is recorded by its rules' hash beside its path: the same rules read the
// folder from any file, edited rules do not.
TEST_F(ShardMapCli, APlanFilesEngineLayoutIsItsRulesNotItsPath) {
  const std::string file = WriteLayer();
  const auto write_plan = [&](const std::string& name, const std::string& text) {
    std::ofstream((dir_ / name).string()) << text;
    return (dir_ / name).string();
  };
  const std::string rules =
      R"({"rules": [{"pattern": "(qkv|gate_up)_proj", "placements": "[S(0)]"},)"
      R"( {"pattern": "(o|down)_proj", "placements": "[S(1)]"}], "default": "[R]"})";
  const std::string plan = write_plan("plan.json", rules);
  const std::string engine = (dir_ / "engine").string();
  test::CommandResult r =
      RunSdrt(absl::StrCat("shard ", Quote(file), " ", Quote(engine), " --mesh 2 --plan ",
                           Quote(plan), " --map vllm-llama --head-size 128"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(engine), " --mesh 2 --plan ", Quote(plan)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The same rules in another file, spaced otherwise and commented.
  const std::string copy = write_plan(
      "copy.json", "{\"comment\": \"the engine's plan\",\n" + rules.substr(1) + "\n");
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(engine), " --mesh 2 --plan ", Quote(copy)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  // The file edited in place: refused, naming the recorded path and rules.
  write_plan("plan.json", absl::StrReplaceAll(rules, {{"[S(1)]", "[R]"}}));
  r = RunSdrtMpi(2, absl::StrCat("load ", Quote(engine), " --mesh 2 --plan ", Quote(plan)));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("holds an engine's layout for --mesh 2 --plan " + plan +
                               " (rules xxh64 "));
  EXPECT_THAT(r.err, HasSubstr("read it with --mesh 2 --plan " + plan + " (the rules recorded)"));
  // A record an older sdrt wrote, by path alone (here a gathered file's, rewritten): read
  // by that path, whatever the rules.
  write_plan("plan.json", rules);
  const std::string gathered = (dir_ / "engine.safetensors").string();
  ASSERT_EQ(RunSdrtMpi(2, absl::StrCat("gather ", Quote(engine), " ", Quote(gathered))).exit_code,
            0);
  absl::StatusOr<SafetensorsFile> file_of = SafetensorsFile::Open(gathered);
  ASSERT_TRUE(file_of.ok()) << file_of.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SafetensorsEntry& e : file_of->entries()) {
    tensors.emplace_back(e.name, *file_of->Get(e.name));
  }
  std::map<std::string, std::string> metadata = file_of->metadata();
  metadata[kEngineLayoutMetadataKey] = "--mesh 2 --plan " + plan;
  const std::string old = (dir_ / "old.safetensors").string();
  ASSERT_TRUE(WriteSafetensors(old, tensors, metadata).ok());
  r = RunSdrt(absl::StrCat("shard ", Quote(old), " ", Quote((dir_ / "old2").string()),
                           " --mesh 2 --plan ", Quote(plan)));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunSdrt(absl::StrCat("shard ", Quote(old), " ", Quote((dir_ / "old3").string()),
                           " --mesh 3 --plan ", Quote(plan)));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("holds an engine's layout for --mesh 2 --plan " + plan + " ("));
}

}  // namespace
}  // namespace sdrt
