// `mpiexec -n N sdrt load DIR --mesh M --plan P` of an sdrt sharded folder in another layout
// (issue 14 section 3: `sdrt load` goes through the reshard engine), run as the built
// binary. case-053: a checkpoint sharded fsdp over 8 ranks is loaded into 3 and 5 ranks with
// fsdp (fewer ranks than rank files: ShardedTensor boxes) and into 2x2 with fsdp-tp; each
// result is checked by sdrt against the folder's hashes and against what `sdrt shard`
// writes for that layout (--verify), each rank reads only its own rank files, wire bytes
// equal the optimum. A damaged rank file and --read root are exit 2.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
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
using test::RunSdrt;
using test::RunSdrtMpi;
using ::testing::HasSubstr;

std::string Quote(const std::string& s) { return test::ShellQuote(s); }

class LoadShardedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(test::TestTmpRoot()) / absl::StrCat("load_sharded_cli_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    full_ = (dir_ / "full.safetensors").string();
    ASSERT_EQ(RunSdrt(absl::StrCat("make ", Quote(full_), " --arch tiny-llama")).exit_code, 0);
    in_ = (dir_ / "fsdp8").string();
    ASSERT_EQ(
        RunSdrt(absl::StrCat("shard ", Quote(full_), " ", Quote(in_), " --mesh 8 --plan fsdp"))
            .exit_code,
        0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The bytes of every rank file of the input folder.
  int64_t RankFileBytes() const {
    int64_t total = 0;
    for (const auto& e : fs::directory_iterator(in_)) {
      if (e.path().filename().string().rfind("rank-", 0) == 0) total += e.file_size();
    }
    return total;
  }

  fs::path dir_;
  std::string full_, in_;
};

TEST_F(LoadShardedCli, Case053EightRankFsdpIntoOtherWorldSizes) {
  for (const auto& [ranks, mesh, plan] : std::vector<std::tuple<int, std::string, std::string>>{
           {3, "3", "fsdp"}, {5, "5", "fsdp"}, {4, "2x2", "fsdp-tp"}}) {
    SCOPED_TRACE(mesh + " " + plan);
    const std::string load = absl::StrCat("load ", Quote(in_), " --mesh ", mesh, " --plan ", plan);
    const CommandResult r = RunSdrtMpi(ranks, load);
    ASSERT_EQ(r.exit_code, 0) << r.all();
    EXPECT_THAT(r.out, HasSubstr(in_ + " (8 ranks, fsdp, mesh 8)"));
    EXPECT_THAT(r.out, HasSubstr("index (each tensor gathered): every piece matches"));
    // Against the rank files `sdrt shard` writes for the target layout, as JSON.
    const std::string ref = (dir_ / ("ref_" + mesh)).string();
    ASSERT_EQ(RunSdrt(absl::StrCat("shard ", Quote(full_), " ", Quote(ref), " --mesh ", mesh,
                                   " --plan ", plan))
                  .exit_code,
              0);
    const CommandResult v = RunSdrtMpi(ranks, load + " --json --verify " + Quote(ref));
    ASSERT_EQ(v.exit_code, 0) << v.all();
    const nlohmann::json j = nlohmann::json::parse(v.out);
    EXPECT_TRUE(j["bit_exact"].get<bool>());
    EXPECT_EQ(j["from"]["ranks"], 8);
    EXPECT_EQ(j["wire_bytes"], j["optimum_bytes"]);
    // Each rank read its own rank files' pieces only: in all, less than the files' bytes
    // (their headers are not counted), and every rank read some.
    int64_t read = 0;
    for (const auto& b : j["bytes_read"]) {
      EXPECT_GT(b.get<int64_t>(), 0);
      read += b.get<int64_t>();
    }
    EXPECT_LE(read, RankFileBytes());
    EXPECT_GT(read, RankFileBytes() * 9 / 10);
  }
}

TEST_F(LoadShardedCli, DamagedRankFileAndReadRootAreExitTwo) {
  const CommandResult root =
      RunSdrtMpi(2, absl::StrCat("load ", Quote(in_), " --mesh 2 --plan tp --read root"));
  EXPECT_EQ(root.exit_code, 2) << root.all();
  EXPECT_THAT(root.err, HasSubstr("sharded folder"));
  // The last bytes of rank file 5 (tensor data, not its header) changed: the rank reading
  // it finds its piece's hash differs and names the file, before anything is loaded.
  const std::string victim = (fs::path(in_) / "rank-00005-of-00008.safetensors").string();
  const auto size = fs::file_size(victim);
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 4));
    f.write("\x55\xaa\x55\xaa", 4);
  }
  const CommandResult r = RunSdrtMpi(3, absl::StrCat("load ", Quote(in_), " --mesh 3 --plan fsdp"));
  EXPECT_EQ(r.exit_code, 2) << r.all();
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr(victim + ": tensor "));
  EXPECT_THAT(r.err, HasSubstr("sdrt.piece_xxh64"));
}

}  // namespace
}  // namespace sdrt
