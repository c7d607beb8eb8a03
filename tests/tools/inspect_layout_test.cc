// `sdrt inspect SRC --layout NAME --mesh M --plan P` and `sdrt inspect DIR --layout NAME`
// (tools/sdrt/internal/layout.h), run as the built binary: the table and picture of a 2-D
// tensor on a 2x2 mesh, an uneven 1-D tensor over 3 ranks with an empty piece, a
// _StridedShard's several runs in --json, a sharded folder's own layout equal to the
// source's under the same plan, a tensor's own mesh under a parallel layout description
// (pipeline stages, vLLM replicas), and the input errors (exit 2, one line).
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using test::CommandResult;
using test::ShellQuote;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand("timeout 60 " + std::string(SDRT_BINARY) + " " + args);
}

class InspectLayout : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = absl::StrCat(test::TestTmpRoot(), "/inspect_layout_",
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    file_ = base + ".safetensors";
    plan_ = base + ".plan.json";
    std::vector<std::pair<std::string, Tensor>> tensors = {
        {"w", test::FiniteBytes(IntVector{6, 4}, DType::kFloat32)},
        {"v", test::FiniteBytes(IntVector{5}, DType::kBFloat16)},
        {"s", test::FiniteBytes(IntVector{8, 2}, DType::kFloat16)},
    };
    ASSERT_TRUE(WriteSafetensors(file_, tensors).ok());
    std::ofstream(plan_) << R"({"rules": [{"pattern": "^w$", "placements": "[S(0), S(1)]"},
                                          {"pattern": "^s$", "placements": "[_S(0, 2), S(0)]"}],
                                "default": "[S(0), R]"})";
  }

  std::string file_;
  std::string plan_;
};

TEST_F(InspectLayout, TwoDimTensorOnATwoByTwoMeshIsATableAndAPicture) {
  const CommandResult r = Sdrt(absl::StrCat("inspect ", ShellQuote(file_),
                                            " --layout w --mesh 2x2 --plan ", ShellQuote(plan_)));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("tensor w: float32 [6, 4] on mesh [2, 2], placements [S(0), S(1)]"));
  // Rank 3 at (1, 1) holds rows [3, 6) and columns [2, 4).
  EXPECT_THAT(r.out, testing::ContainsRegex("3 +\\[1, 1\\] +\\[3, 2\\] +\\[3, 6\\) +\\[2, 4\\)"));
  // The picture: two rows of cells by two columns, one rank each.
  EXPECT_THAT(r.out, testing::ContainsRegex("\\[0, 3\\) +0 +1\n"));
  EXPECT_THAT(r.out, testing::ContainsRegex("\\[3, 6\\) +2 +3\n"));
}

TEST_F(InspectLayout, UnevenOneDimTensorShowsTheEmptyPieceAndReplicas) {
  // v [5] on [2, 2] with [S(0), R]: ranks (i, 0) and (i, 1) hold the same chunk of 3 or 2.
  const CommandResult r = Sdrt(absl::StrCat("inspect ", ShellQuote(file_),
                                            " --layout v --mesh 2x2 --plan ", ShellQuote(plan_)));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, testing::ContainsRegex("ranks +0,1 +2,3\n"));
  // Over 4 ranks with fsdp, rank 3 holds nothing of [5] (chunks 2, 2, 1, 0).
  const CommandResult four =
      Sdrt(absl::StrCat("inspect ", ShellQuote(file_), " --layout v --mesh 4 --plan fsdp"));
  ASSERT_EQ(four.exit_code, 0) << four.all();
  EXPECT_THAT(four.out, testing::ContainsRegex("3 +\\[3\\] +\\[0\\] +none\n"));
  EXPECT_THAT(four.out, testing::ContainsRegex("ranks +0 +1 +2\n"));
}

// A 4-bit tensor cut inside a byte is drawn, and the line under it says the commands that
// move it refuse it (with the reason they give).
TEST(InspectLayoutSubByte, ACutInsideAByteIsSaidUnderThePicture) {
  const std::string file = absl::StrCat(test::TestTmpRoot(), "/inspect_layout_f4.safetensors");
  const std::string header = R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})";
  std::ofstream(file, std::ios::binary) << test::Image(header, "\x21");
  const CommandResult r =
      Sdrt(absl::StrCat("inspect ", ShellQuote(file), " --layout a --mesh 2 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_THAT(r.out, HasSubstr("\nrefused by load, shard and reshard: tensor 'a' "
                               "(float4_e2m1fn_x2 [2]): Shard(0) over 2 ranks gives pieces of 1, "
                               "1 elements along dim 0; a 4-bit element cannot be cut inside a "
                               "byte\n"));
  // Whole bytes: nothing said.
  const CommandResult whole =
      Sdrt(absl::StrCat("inspect ", ShellQuote(file), " --layout a --mesh 1 --plan fsdp"));
  ASSERT_EQ(whole.exit_code, 0) << whole.all();
  EXPECT_THAT(whole.out, testing::Not(HasSubstr("refused")));
}

TEST_F(InspectLayout, StridedShardRunsInJson) {
  const CommandResult r = Sdrt(absl::StrCat("inspect ", ShellQuote(file_), " --layout s --mesh 2x2 --plan ",
                                            ShellQuote(plan_), " --json"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["placements"], "[_S(0, 2), S(0)]");
  ASSERT_EQ(j["ranks"].size(), 4u);
  // s [8, 2]: the tp chunks are rows [0, 4) and [4, 8), and rank (d, t) holds the d-th dp
  // half of tp chunk t (ranks are row-major: rank 1 is (0, 1), rank 2 is (1, 0)).
  EXPECT_EQ(j["ranks"][0]["runs"][0], nlohmann::json::parse("[[0, 2]]"));
  EXPECT_EQ(j["ranks"][1]["runs"][0], nlohmann::json::parse("[[4, 6]]"));
  EXPECT_EQ(j["ranks"][2]["runs"][0], nlohmann::json::parse("[[2, 4]]"));
  EXPECT_EQ(j["ranks"][3]["runs"][0], nlohmann::json::parse("[[6, 8]]"));
  EXPECT_EQ(j["ranks"][3]["runs"][1], nlohmann::json::parse("[[0, 2]]"));
}

TEST_F(InspectLayout, ShardedFolderShowsItsOwnLayout) {
  const std::string dir = file_ + ".sharded";
  const CommandResult shard = Sdrt(absl::StrCat("shard ", ShellQuote(file_), " ", ShellQuote(dir),
                                                " --mesh 2x2 --plan ", ShellQuote(plan_), " --overwrite"));
  ASSERT_EQ(shard.exit_code, 0) << shard.all();
  const CommandResult from_dir = Sdrt(absl::StrCat("inspect ", ShellQuote(dir), " --layout w"));
  const CommandResult from_file = Sdrt(absl::StrCat("inspect ", ShellQuote(file_),
                                                    " --layout w --mesh 2x2 --plan ", ShellQuote(plan_)));
  ASSERT_EQ(from_dir.exit_code, 0) << from_dir.all();
  EXPECT_EQ(from_dir.out, from_file.out);
  // The folder says its own mesh and plan: giving them is an error.
  const CommandResult both = Sdrt(absl::StrCat("inspect ", ShellQuote(dir), " --layout w --mesh 4"));
  EXPECT_EQ(both.exit_code, 2) << both.all();
  EXPECT_THAT(both.err, HasSubstr("sharded checkpoint"));
}

TEST_F(InspectLayout, InputErrorsAreExitTwoWithOneLine) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {" --layout nope --mesh 2 --plan fsdp", "no tensor 'nope'"},
      {" --layout w --plan fsdp", "needs --mesh and --plan"},
      {" --layout w --mesh 2x2 --plan hsdp_typo", "hsdp_typo"},
      {" --mesh 2", "go with --layout NAME or --map"},
      {" --cast f32", "--cast goes with --map"},
      {" --layout w --mesh 2 --plan fsdp --cast f32", "--cast goes with --map"},
  };
  for (const auto& [args, message] : cases) {
    const CommandResult r = Sdrt(absl::StrCat("inspect ", ShellQuote(file_), args));
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.all();
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

TEST(InspectParallelLayout, ATensorOnItsStagesRanks) {
  const std::string file = test::TestTmpRoot() + "/inspect_parallel_layout.safetensors";
  const CommandResult made = Sdrt("make --arch tiny-llama --overwrite " + ShellQuote(file));
  ASSERT_EQ(made.exit_code, 0) << made.all();
  // tiny-llama has 2 layers: with pp 2, layer 1 is stage 1, ranks (p * dp + d) * tp + t.
  const CommandResult down =
      Sdrt("inspect " + ShellQuote(file) +
           " --layout model.layers.1.mlp.down_proj.weight --plan megatron:tp=2,pp=2,dp=2");
  ASSERT_EQ(down.exit_code, 0) << down.all();
  EXPECT_THAT(down.out, HasSubstr("[64, 172] on mesh [2, 2] (dp, tp) of ranks 4, 5, 6, 7, "
                                  "placements [R, S(1)]"));
  EXPECT_THAT(down.out, testing::ContainsRegex("7 +\\[1, 1\\] +\\[64, 86\\] +\\[0, 64\\) +"
                                               "\\[86, 172\\)"));
  // vLLM: replicas outermost, the head on the last stage; --mesh is the world size.
  const CommandResult head = Sdrt("inspect " + ShellQuote(file) +
                                  " --layout lm_head.weight --plan vllm:tp=2,pp=2 --mesh 8");
  ASSERT_EQ(head.exit_code, 0) << head.all();
  EXPECT_THAT(head.out,
              HasSubstr("on mesh [2, 2] (dp, tp) of ranks 2, 3, 6, 7, placements [R, S(0)]"));
  const std::vector<std::pair<std::string, std::string>> refused = {
      {" --plan megatron:tp=2 --mesh 2x2", "the world size (one whole number >= 1)"},
      {" --plan megatron:tp=2", "dp is left out"},
      {" --plan megatron:pp=4 --mesh 4", "pp=4 needs at least 4 layers, the model has 2"},
      {" --plan megatron:tp=3 --mesh 4", "does not divide the world of 4"},
  };
  for (const auto& [args, message] : refused) {
    const CommandResult r =
        Sdrt("inspect " + ShellQuote(file) + " --layout lm_head.weight" + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.all();
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
  }
}

}  // namespace
}  // namespace sdrt
