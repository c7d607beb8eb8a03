// `mpiexec -n N sdrt reshard INDIR OUTDIR --mesh M --plan P` (issue 14 section 3), run as the
// built binary: a checkpoint sharded fsdp over 4 ranks becomes fsdp over 3 ranks (uneven;
// case-053), fsdp-tp on 2x2 and tp over 2, each folder byte for byte what `sdrt shard`
// writes from the full file; too few ranks, an OUTDIR that is not a checkpoint and an
// OUTDIR that is the input are exit 2 with the input untouched; --json has the plan's
// figures, wire bytes equal to the optimum.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using ::testing::HasSubstr;

std::string Quote(const std::string& s) { return test::ShellQuote(s); }
using test::ReadFileText;
using test::RunSdrt;
using test::RunSdrtMpi;

// Every file of `dir` with its bytes, by name.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out.push_back(e.path().filename().string() + "\n" + ReadFileText(e.path().string()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

class ReshardCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(test::TestTmpRoot()) / absl::StrCat("reshard_cli_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    full_ = (dir_ / "full.safetensors").string();
    ASSERT_EQ(
        RunSdrt(absl::StrCat("make ", Quote(full_), " --arch llama-8b --scale 0.02")).exit_code, 0);
    in_ = (dir_ / "fsdp4").string();
    ASSERT_EQ(
        RunSdrt(absl::StrCat("shard ", Quote(full_), " ", Quote(in_), " --mesh 4 --plan fsdp"))
            .exit_code,
        0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string full_, in_;
};

TEST_F(ReshardCli, EveryTargetIsWhatShardWrites) {
  for (const auto& [mesh, plan] : std::vector<std::pair<std::string, std::string>>{
           {"3", "fsdp"}, {"2x2", "fsdp-tp"}, {"2", "tp"}}) {
    SCOPED_TRACE(mesh + " " + plan);
    const std::string out = (dir_ / ("out_" + plan)).string();
    const std::string ref = (dir_ / ("ref_" + plan)).string();
    const CommandResult r = RunSdrtMpi(4, absl::StrCat("reshard ", Quote(in_), " ", Quote(out),
                                                       " --mesh ", mesh, " --plan ", plan));
    ASSERT_EQ(r.exit_code, 0) << r.all();
    EXPECT_THAT(r.out, HasSubstr("from 4 ranks (fsdp, mesh 4)"));
    ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(full_), " ", Quote(ref), " --mesh ", mesh,
                                   " --plan ", plan))
                  .exit_code,
              0);
    EXPECT_EQ(Files(out), Files(ref));
  }
}

TEST_F(ReshardCli, JsonHasThePlansFigures) {
  const std::string out = (dir_ / "out").string();
  const CommandResult r = RunSdrtMpi(
      4, absl::StrCat("reshard ", Quote(in_), " ", Quote(out), " --mesh 2 --plan tp --json"));
  ASSERT_EQ(r.exit_code, 0) << r.all();
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["command"], "reshard");
  EXPECT_EQ(j["tensors"], 12);
  EXPECT_GT(j["wire_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["wire_bytes"], j["optimum_bytes"]);
  EXPECT_EQ(j["peak_rss_bytes"].size(), 4u);
}

TEST_F(ReshardCli, BadInvocationsAreExitTwoAndTouchNothing) {
  const std::vector<std::string> before = Files(in_);
  const std::string out = (dir_ / "out").string();
  CommandResult few =
      RunSdrtMpi(2, absl::StrCat("reshard ", Quote(in_), " ", Quote(out), " --mesh 2 --plan fsdp"));
  EXPECT_EQ(few.exit_code, 2) << few.all();
  EXPECT_THAT(few.err, HasSubstr("(run with -n 4)"));
  EXPECT_FALSE(fs::exists(out));
  fs::create_directories(out);
  std::ofstream(out + "/mine.txt") << "keep";
  CommandResult occupied = RunSdrtMpi(4, absl::StrCat("reshard ", Quote(in_), " ", Quote(out),
                                                      " --mesh 2 --plan fsdp --overwrite"));
  EXPECT_EQ(occupied.exit_code, 2) << occupied.all();
  EXPECT_THAT(occupied.err, HasSubstr("refusing to replace it"));
  EXPECT_EQ(ReadFileText(out + "/mine.txt"), "keep");
  CommandResult onto_input = RunSdrtMpi(4, absl::StrCat("reshard ", Quote(in_), " ", Quote(in_),
                                                        " --mesh 2 --plan fsdp --overwrite"));
  EXPECT_EQ(onto_input.exit_code, 2) << onto_input.all();
  CommandResult bad_plan = RunSdrtMpi(
      4, absl::StrCat("reshard ", Quote(in_), " ", Quote(out), " --mesh 2x2 --plan hsdp7"));
  EXPECT_EQ(bad_plan.exit_code, 2) << bad_plan.all();
  EXPECT_EQ(Files(in_), before);
  // No temporary folder is left beside OUTDIR.
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".out.tmp"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace sdrt
