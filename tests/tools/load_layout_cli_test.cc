// `sdrt load --plan DESCRIPTION` (a parallel layout, core/checkpoint/parallel_layout.h) under
// mpiexec -n 3 and 4 on one machine: every rank reads only its own stage's and experts'
// pieces of a small qwen3-moe file, checked bit for bit against the file; a pipeline of one
// rank per stage keeps each byte once over the ranks; a sharded folder of the file is
// resharded into the same pieces; a weight map and an FP8 cast go into the stages' own
// tensors; what a description cannot go with (--read root, --read-once-per-node, --verify,
// another world size, --mesh not a number) is bad input, and so is a description given to
// `sdrt shard`.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

int64_t Sum(const Json& values) {
  int64_t sum = 0;
  for (const Json& v : values) sum += v.get<int64_t>();
  return sum;
}

// Each test makes its own file in a folder of its own name: CTest runs the tests of one
// suite as processes side by side.
class LoadLayoutCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    file_ = test::FreshDir("load_layout_cli_" + name) + "/moe.safetensors";
    const test::CommandResult made =
        test::RunSdrt("make --arch qwen3-moe --scale 0.05 " + test::ShellQuote(file_));
    ASSERT_EQ(made.exit_code, 0) << made.all();
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(std::filesystem::path(file_).parent_path());
  }
  std::string Load(const std::string& rest) const {
    return "load " + test::ShellQuote(file_) + " --json " + rest;
  }
  std::string file_;
};

// Three stages of one rank: each tensor on exactly one rank, every piece the file's.
TEST_F(LoadLayoutCli, EachStageReadsItsOwnLayers) {
  // --mesh left out: the world is mpiexec's.
  const test::CommandResult r = test::RunSdrtMpi(3, Load("--plan megatron:pp=3"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j.value("bit_exact", false)) << j;
  EXPECT_EQ(j["plan"], "megatron:tp=1,pp=3,dp=1,ep=1,etp=1") << j;
  EXPECT_EQ(j["read"], "all") << j;
  EXPECT_EQ(j["mesh"], "3") << j;
  EXPECT_THAT(j["read_reason"].get<std::string>(), HasSubstr("parallel layout")) << j;
  EXPECT_EQ(Sum(j["bytes_kept"]), j["bytes"].get<int64_t>()) << j;
  for (const Json& kept : j["bytes_kept"]) {
    EXPECT_GT(kept.get<int64_t>(), 0) << j;
    EXPECT_LT(kept.get<int64_t>(), j["bytes"].get<int64_t>()) << j;
  }
  EXPECT_EQ(j["bytes_read"], j["bytes_kept"]) << j;  // nothing read twice
}

// Megatron's experts over ep, vLLM's stages with tp: bit exact. With dp 1, tp 2 keeps the
// sharded weights once and the replicated norms twice: more than the file over the ranks,
// less than twice it; Megatron's tp 2 x ep 2 on 4 ranks has dp 2 (each expert on the 2
// ranks of its ep rank, each dense tensor on both replicas): more than twice, under 4x.
TEST_F(LoadLayoutCli, ExpertsAndTensorParallelStages) {
  const struct {
    const char* plan;
    int64_t above, below;  // the bytes kept over the ranks, in multiples of the file's
  } cases[] = {
      {"vllm:tp=2,pp=2", 1, 2}, {"megatron:tp=2,pp=2", 1, 2}, {"megatron:tp=2,ep=2", 2, 4}};
  for (const auto& c : cases) {
    const test::CommandResult r =
        test::RunSdrtMpi(4, Load(std::string("--mesh 4 --read all --plan ") + c.plan));
    ASSERT_EQ(r.exit_code, 0) << c.plan << ": " << r.all();
    const Json j = Json::parse(r.out);
    EXPECT_TRUE(j.value("bit_exact", false)) << c.plan << ": " << j;
    const int64_t bytes = j["bytes"].get<int64_t>();
    EXPECT_GT(Sum(j["bytes_kept"]), c.above * bytes) << c.plan << ": " << j;
    EXPECT_LT(Sum(j["bytes_kept"]), c.below * bytes) << c.plan << ": " << j;
    // Rows of Shard(1) pieces are read through small gaps: at most 1/32 more.
    EXPECT_LE(Sum(j["bytes_read"]), Sum(j["bytes_kept"]) + Sum(j["bytes_kept"]) / 32) << j;
  }
}

TEST_F(LoadLayoutCli, WhatADescriptionDoesNotGoWithIsBadInput) {
  const std::string plan = " --mesh 4 --plan megatron:tp=2,pp=2";
  for (const char* bad : {" --read root", " --read-once-per-node", " --verify /nonexistent"}) {
    const test::CommandResult r = test::RunSdrtMpi(4, Load(plan + bad));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.all();
    EXPECT_THAT(r.err, HasSubstr("(a parallel layout description) goes without")) << bad;
  }
  const test::CommandResult fewer = test::RunSdrtMpi(2, Load(plan));
  EXPECT_EQ(fewer.exit_code, 2) << fewer.all();
  EXPECT_THAT(fewer.err, HasSubstr("has 4 ranks but mpiexec started 2"));
  for (const char* mesh : {"2x2", "+4", "04", "0"}) {
    const test::CommandResult grid =
        test::RunSdrtMpi(4, Load(std::string("--mesh ") + mesh + " --plan megatron:tp=2,pp=2"));
    EXPECT_EQ(grid.exit_code, 2) << mesh << ": " << grid.all();
    EXPECT_THAT(grid.err, HasSubstr("the world size (one whole number >= 1)")) << mesh;
  }
  // A sharded folder holds every tensor on one mesh: shard refuses a description.
  const std::string out = std::filesystem::path(file_).parent_path().string() + "/sharded";
  const test::CommandResult shard =
      test::RunSdrt("shard " + test::ShellQuote(file_) + " " + test::ShellQuote(out) +
                    " --mesh 2 --plan megatron:pp=2");
  EXPECT_EQ(shard.exit_code, 2) << shard.all();
  EXPECT_THAT(shard.err, HasSubstr("is a parallel layout description"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// A trainer's sharded folder (fsdp over 4 ranks, and over 2: fewer rank files than ranks)
// loaded into stages and experts on 2-4 ranks: the pieces the file's own load keeps, each
// rank's tensors checked whole against the folder's index; a damaged rank file is exit 2.
TEST_F(LoadLayoutCli, AShardedFolderIsReshardedIntoTheStages) {
  const std::string dir = std::filesystem::path(file_).parent_path().string();
  for (const int writers : {4, 2}) {
    const std::string folder = dir + "/fsdp" + std::to_string(writers);
    ASSERT_EQ(test::RunSdrt("shard " + test::ShellQuote(file_) + " " + test::ShellQuote(folder) +
                            " --mesh " + std::to_string(writers) + " --plan fsdp")
                  .exit_code,
              0);
    const struct {
      int ranks;
      const char* plan;
    } cases[] = {{3, "megatron:pp=3"}, {4, "megatron:tp=2,ep=2"}, {2, "vllm:tp=2"}};
    for (const auto& c : cases) {
      SCOPED_TRACE(std::to_string(writers) + " rank files into " + c.plan);
      const std::string rest = " --json --mesh " + std::to_string(c.ranks) + " --plan " + c.plan;
      const test::CommandResult from_file = test::RunSdrtMpi(c.ranks, Load(rest));
      ASSERT_EQ(from_file.exit_code, 0) << from_file.all();
      const test::CommandResult r =
          test::RunSdrtMpi(c.ranks, "load " + test::ShellQuote(folder) + rest);
      ASSERT_EQ(r.exit_code, 0) << r.all();
      const Json j = Json::parse(r.out);
      EXPECT_TRUE(j.value("bit_exact", false)) << j;
      EXPECT_THAT(j["verified_against"].get<std::string>(),
                  HasSubstr("'s index (each rank's tensors loaded whole)"));
      EXPECT_EQ(j["bytes_kept"], Json::parse(from_file.out)["bytes_kept"]) << j;
      EXPECT_EQ(j["wire_bytes"], j["optimum_bytes"]) << j;
    }
  }
  // One byte of a rank file's data flipped: its piece hash no longer holds.
  const std::string rank_file = dir + "/fsdp2/rank-00001-of-00002.safetensors";
  {
    std::fstream f(rank_file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 0x5a));
    ASSERT_TRUE(f.good());
  }
  const test::CommandResult bad = test::RunSdrtMpi(
      3, "load " + test::ShellQuote(dir + "/fsdp2") + " --mesh 3 --plan megatron:pp=3");
  EXPECT_EQ(bad.exit_code, 2) << bad.all();
}

// vLLM's fused buffers in two stages of tp 2 (tiny-llama: 2 layers, 2 kv heads of 16): every
// rank of a stage keeps half of its layer's fused tensors, the two stages about as much;
// the counts are the whole engine's. FP8 weights with their scales likewise.
TEST_F(LoadLayoutCli, AWeightMapIntoTheStagesOwnTensors) {
  const std::string llama = std::filesystem::path(file_).parent_path().string() + "/llama";
  ASSERT_EQ(test::RunSdrt("make --arch tiny-llama " + test::ShellQuote(llama)).exit_code, 0);
  const struct {
    const char* extra;
    int64_t engine_tensors;
  } cases[] = {{"--map vllm-llama --head-size 16 --plan vllm:tp=2,pp=2", 15},
               {"--cast fp8-tensor --plan megatron:tp=2,pp=2", 21 + 14},
               {"--map vllm-llama --head-size 16 --cast f32 --plan megatron:pp=2,dp=2", 15}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra);
    const test::CommandResult r = test::RunSdrtMpi(
        4, "load " + test::ShellQuote(llama) + " --json --mesh 4 " + c.extra);
    ASSERT_EQ(r.exit_code, 0) << r.all();
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["engine_tensors"], c.engine_tensors) << j;
    const Json& kept = j["bytes_kept"];
    for (int stage : {0, 2}) {
      EXPECT_GT(kept[stage].get<int64_t>(), 0) << j;
      // The ranks of a stage keep alike (tp halves, or dp replicas).
      EXPECT_EQ(kept[stage], kept[stage + 1]) << j;
    }
    // The stages split the layers: neither keeps much more than the other.
    EXPECT_LT(kept[0].get<int64_t>(), 2 * kept[2].get<int64_t>()) << j;
    EXPECT_LT(kept[2].get<int64_t>(), 2 * kept[0].get<int64_t>()) << j;
  }
}

// GPT-2 ties its head to wte: with two stages, the last stage's ranks keep their tp half of
// wte too (from the file and from a sharded folder of another world), bit for bit.
TEST_F(LoadLayoutCli, ATiedEmbeddingReachesTheLastStage) {
  const std::string dir = std::filesystem::path(file_).parent_path().string();
  const std::string gpt2 = dir + "/gpt2.safetensors";
  ASSERT_EQ(test::RunSdrt("make --arch gpt2 --scale 0.2 --dtype f32 " + test::ShellQuote(gpt2))
                .exit_code,
            0);
  ASSERT_EQ(test::RunSdrt("shard " + test::ShellQuote(gpt2) + " " +
                          test::ShellQuote(dir + "/gpt2-fsdp3") + " --mesh 3 --plan fsdp")
                .exit_code,
            0);
  const int64_t wte_half = 10051 * 156 * 4 / 2;  // [vocab, hidden] f32 at scale 0.2, by tp
  for (const std::string& src : {gpt2, dir + "/gpt2-fsdp3"}) {
    SCOPED_TRACE(src);
    const test::CommandResult r = test::RunSdrtMpi(
        4, "load " + test::ShellQuote(src) + " --json --plan megatron:tp=2,pp=2");
    ASSERT_EQ(r.exit_code, 0) << r.all();
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j["bit_exact"], true) << j;
    for (int rank = 0; rank < 4; ++rank) {
      EXPECT_GT(j["bytes_kept"][rank].get<int64_t>(), wte_half) << j;
    }
  }
}

}  // namespace
}  // namespace sdrt
