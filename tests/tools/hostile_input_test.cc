// Hostile input to the CLI (issue 12): files that are not what they claim to be, counts and
// sizes chosen to hang or exhaust memory. Every case must end at once with exit code 2 and
// one line naming the input, never hang or die from a signal.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

using test::CommandResult;

// Runs sdrt with `args` under coreutils' timeout, so a hang fails the test (exit 124)
// instead of blocking it.
CommandResult Sdrt(const std::string& args) {
  return test::RunCommand("timeout 20 " + std::string(SDRT_BINARY) + " " + args);
}

// One line on stderr, nothing on stdout, exit code 2.
void ExpectBadInput(const CommandResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
  for (const std::string& p : parts) EXPECT_THAT(r.err, HasSubstr(p));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A tiny model to shard; fails the test when `sdrt make` does.
std::string MakeModel(const std::string& root) {
  const std::string path = root + "/tiny.safetensors";
  const CommandResult r = Sdrt("make --arch tiny-llama " + path);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  return path;
}

// Finding 4: index.json and PLAN.json are read by one reader that refuses anything but a
// regular file (opening a FIFO does not wait for a writer) and caps the size.
TEST(HostileInput, IndexJsonThatIsNotARegularFileOrTooLarge) {
  const std::string root = test::FreshDir("hostile_input_index");
  const std::string fifo_dir = root + "/fifo";
  fs::create_directories(fifo_dir);
  ASSERT_EQ(mkfifo((fifo_dir + "/index.json").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  ExpectBadInput(Sdrt("inspect " + fifo_dir),
                 {fifo_dir + "/index.json", "not a regular file", "a FIFO"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  const std::string zero_dir = root + "/zero";
  fs::create_directories(zero_dir);
  fs::create_symlink("/dev/zero", zero_dir + "/index.json");
  ExpectBadInput(Sdrt("inspect " + zero_dir), {"not a regular file", "a character device"});

  // A sparse file over the 64 MiB cap is refused from its size, without reading it.
  const std::string big_dir = root + "/big";
  fs::create_directories(big_dir);
  { std::ofstream(big_dir + "/index.json") << "{"; }
  fs::resize_file(big_dir + "/index.json", (int64_t{64} << 20) + 1);
  ExpectBadInput(Sdrt("inspect " + big_dir), {"67108865 bytes", "over the limit", "64 MiB"});

  // A link to a regular index.json is still an input like any other: it is read.
  const std::string linked = root + "/linked";
  fs::create_directories(linked);
  { std::ofstream(root + "/real_index.json") << "[]"; }
  fs::create_symlink(root + "/real_index.json", linked + "/index.json");
  const CommandResult r = Sdrt("inspect " + linked);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("not a regular file")));
}

TEST(HostileInput, PlanJsonThatIsNotARegularFile) {
  const std::string root = test::FreshDir("hostile_input_plan");
  const std::string model = MakeModel(root);
  ASSERT_EQ(mkfifo((root + "/PLAN.json").c_str(), 0600), 0);
  ExpectBadInput(
      Sdrt("shard " + model + " " + root + "/out --mesh 2 --plan " + root + "/PLAN.json"),
      {"plan file " + root + "/PLAN.json", "not a regular file (a FIFO)"});
  fs::create_symlink("/dev/zero", root + "/zero.json");
  ExpectBadInput(
      Sdrt("shard " + model + " " + root + "/out --mesh 2 --plan " + root + "/zero.json"),
      {"zero.json", "a character device"});
  EXPECT_FALSE(fs::exists(root + "/out"));
}

// Finding 3: a _StridedShard split factor of 9e18 in index.json or PLAN.json looped that many
// times in validation; it is refused at once, naming the bound.
TEST(HostileInput, HugeSplitFactorIsRefusedAtOnce) {
  const std::string root = test::FreshDir("hostile_input_split_factor");
  const std::string model = MakeModel(root);
  const std::string ckpt = root + "/ckpt";
  CommandResult r = Sdrt("shard " + model + " " + ckpt + " --mesh 2x2 --plan fsdp-tp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string index = ReadBytes(ckpt + "/index.json");
  const std::string from = "_S(0, 2)";
  ASSERT_NE(index.find(from), std::string::npos);
  for (size_t at = index.find(from); at != std::string::npos; at = index.find(from, at)) {
    index.replace(at, from.size(), "_S(0, 9000000000000000000)");
  }
  { std::ofstream(ckpt + "/index.json", std::ios::binary | std::ios::trunc) << index; }
  const auto start = std::chrono::steady_clock::now();
  ExpectBadInput(Sdrt("inspect " + ckpt), {"index.json", "split factor in [1, 1048576]"});

  { std::ofstream(root + "/PLAN.json") << R"({"default": "[_S(0, 9000000000000000000), R]"})"; }
  ExpectBadInput(
      Sdrt("shard " + model + " " + root + "/out --mesh 2x2 --plan " + root + "/PLAN.json"),
      {"PLAN.json", "split factor in [1, 1048576]"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// index.json naming a key twice was read last-wins; it is refused.
TEST(HostileInput, DuplicateKeyInIndexJsonIsRefused) {
  const std::string root = test::FreshDir("hostile_input_duplicate");
  const std::string model = MakeModel(root);
  const std::string ckpt = root + "/ckpt";
  CommandResult r = Sdrt("shard " + model + " " + ckpt + " --mesh 2 --plan fsdp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string index = ReadBytes(ckpt + "/index.json");
  const size_t at = index.find("\"plan\"");
  ASSERT_NE(at, std::string::npos);
  index.insert(at, "\"plan\": \"tp\", ");
  { std::ofstream(ckpt + "/index.json", std::ios::binary | std::ios::trunc) << index; }
  ExpectBadInput(Sdrt("inspect " + ckpt), {"index.json", "duplicate key \"plan\""});
}

// Finding 8: --mesh 3000000000 or 4294967296x4294967296 died of std::bad_alloc; now one
// short line naming the cap, exit 2, nothing written.
TEST(HostileInput, MeshOverTheCapIsOneShortLine) {
  const std::string root = test::FreshDir("hostile_input_mesh");
  const std::string model = MakeModel(root);
  for (const char* mesh : {"3000000000", "4294967296x4294967296"}) {
    const CommandResult r =
        Sdrt("shard " + model + " " + root + "/out --mesh " + mesh + " --plan fsdp");
    ExpectBadInput(r, {"more than 1048576 ranks"});
    EXPECT_LT(r.err.size(), 300u) << r.err;
  }
  EXPECT_FALSE(fs::exists(root + "/out"));
}

// Issue 12: `make --seed -1` became 2^64-1 silently; a negative or oversized seed is refused
// with exit 2, naming the flag and the value, and nothing is written.
TEST(HostileInput, NegativeSeedIsRefused) {
  const std::string root = test::FreshDir("hostile_input_seed");
  for (const char* seed : {"-1", "18446744073709551616", "+3"}) {
    ExpectBadInput(Sdrt(absl::StrCat("make --seed=", seed, " ", root, "/m.safetensors")),
                   {"--seed", absl::StrCat("\"", seed, "\"")});
  }
  EXPECT_FALSE(fs::exists(root + "/m.safetensors"));
  EXPECT_EQ(Sdrt("make --seed 18446744073709551615 " + root + "/m.safetensors").exit_code, 0);
}

// A JSON input of many siblings took time quadratic in their number (the duplicate-key check
// used nlohmann's parser callback, which rescans an object's parent at every object end):
// 400,000 empty objects in 1.2 MB ran past any timeout (hours at the 64 MiB cap); the check
// is now one linear pass.
TEST(HostileInput, JsonOfManySiblingsIsParsedInLinearTime) {
  const std::string root = test::FreshDir("hostile_input_siblings");
  const std::string model = MakeModel(root);
  std::string siblings = "[";
  for (int i = 0; i < 400000; ++i) siblings += i == 0 ? "{}" : ",{}";
  siblings += "]";
  fs::create_directories(root + "/ckpt");
  { std::ofstream(root + "/ckpt/index.json") << "{\"x\":" << siblings << "}"; }
  { std::ofstream(root + "/PLAN.json") << "{\"comment\":" << siblings << ",\"default\":\"[R]\"}"; }
  const auto start = std::chrono::steady_clock::now();
  ExpectBadInput(Sdrt("inspect " + root + "/ckpt"), {"index.json"});
  // PLAN.json ignores fields it does not know ("comment"): the plan is "[R]" for all.
  const CommandResult r =
      Sdrt("shard " + model + " " + root + "/out --mesh 2 --plan " + root + "/PLAN.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// shard wrote checkpoints its own reader refuses (a tensor named "", metadata that makes
// index.json larger than the reader's cap), which `--overwrite` then refused to replace.
// What shard writes is checked against the reader first: exit 2, nothing written.
TEST(HostileInput, ShardRefusesWhatItsReaderWouldRefuse) {
  const std::string root = test::FreshDir("hostile_input_unreadable");
  const std::string header = R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  {
    std::ofstream(root + "/empty_name.safetensors", std::ios::binary)
        << test::Image(header, std::string(8, '\0'));
  }
  ExpectBadInput(Sdrt("shard " + root + "/empty_name.safetensors " + root + "/out --mesh 2 --plan fsdp"),
                 {"empty_name.safetensors", "sdrt could read back", "invalid tensor name"});
  EXPECT_FALSE(fs::exists(root + "/out"));
  // A tensor of 13 dims: no reader of a sharded checkpoint moves more than 12.
  const std::string dims = R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1],)"
                           R"("data_offsets":[0,4]}})";
  {
    std::ofstream(root + "/dims13.safetensors", std::ios::binary)
        << test::Image(dims, std::string(4, '\0'));
  }
  ExpectBadInput(
      Sdrt("shard " + root + "/dims13.safetensors " + root + "/out13 --mesh 2 --plan fsdp"),
      {"dims13.safetensors", "sdrt could read back",
       "(a): 13 dims; sdrt reads a sharded tensor of at most 12"});
  EXPECT_FALSE(fs::exists(root + "/out13"));
}

}  // namespace
}  // namespace sdrt
