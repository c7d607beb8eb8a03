// `sdrt make` streams its checkpoint (tools/sdrt/make.cc): the bytes are those of the
// in-memory writer it replaced, its peak memory stays near the largest tensor, and a file
// the file system has no room for is refused at once with exit 2, writing nothing.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"
#include "xxhash.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

test::CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(std::string(SDRT_BINARY) + " " + args);
}

std::string FileXxh64(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  const std::string bytes = s.str();
  return absl::StrFormat("%016x", XXH64(bytes.data(), bytes.size(), 0));
}

// Runs the sdrt binary with `args` (stdout and stderr discarded) and returns its peak
// resident memory in bytes (wait4's ru_maxrss of that child alone), or -1 when it failed.
int64_t PeakRssBytes(const std::vector<std::string>& args) {
  std::vector<std::string> argv_text = {SDRT_BINARY};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  struct rusage usage;
  if (pid < 0 || wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0) {
    return -1;
  }
  return int64_t{usage.ru_maxrss} * 1024;
}

// The files the in-memory writer (before streaming, commit cbc8fcf) wrote, by XXH64.
TEST(SdrtMakeStream, BytesAreThoseOfTheInMemoryWriter) {
  const std::string root = test::FreshDir("make_stream_bytes");
  struct Case {
    const char* args;
    const char* xxh64;
  };
  const Case cases[] = {
      {"--arch tiny-llama", "00cba76c789a72a8"},
      {"--arch tiny-llama --dtype f32 --seed 7", "716bc47b7f91f84f"},
      {"--arch llama-8b --scale 0.02 --dtype f16 --seed 3", "1ec3cf6056702d31"},
      {"--arch llama-70b --scale 0.01", "45d7672d5868634c"},
      {"--arch bert-base --scale 0.05 --dtype f32", "399c5e96024f1100"},
      {"--arch gpt2 --scale 0.05 --seed 9", "a3e4f2e37a5f9427"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const std::string out = root + "/m.safetensors";
    const test::CommandResult r = Sdrt("make --overwrite " + std::string(c.args) + " " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(FileXxh64(out), c.xxh64);
  }
}

// Peak memory of a 115 MiB checkpoint (llama-8b at scale 1/8 in float32, largest tensor
// 31 MiB) stays within the largest tensor (plus slack) of a tiny checkpoint's peak; the
// in-memory writer held all 115 MiB.
TEST(SdrtMakeStream, PeakMemoryIsNearTheLargestTensor) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer keeps freed memory in quarantine: peak RSS says nothing";
#endif
  const std::string root = test::FreshDir("make_stream_rss");
  const int64_t base = PeakRssBytes({"make", "--arch", "tiny-llama", root + "/tiny.safetensors"});
  ASSERT_GT(base, 0);
  const std::vector<std::string> mid = {"make",  "--arch",  "llama-8b", "--scale",
                                        "0.125", "--dtype", "f32"};
  std::vector<std::string> args = mid;
  args.push_back("--json");
  args.push_back(root + "/mid.safetensors");
  const int64_t peak = PeakRssBytes(args);
  ASSERT_GT(peak, 0);
  const test::CommandResult r =
      Sdrt("make --arch llama-8b --scale 0.125 --dtype f32 --json " + root + "/mid2.safetensors");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t bytes = nlohmann::json::parse(r.out)["bytes"];
  const int64_t largest = int64_t{16032} * 512 * 4;  // vocab x hidden, float32
  ASSERT_GT(bytes, 3 * largest);
  std::printf(
      "sdrt make peak RSS: %.1f MiB for %.1f MiB of data (largest tensor %.1f MiB; "
      "tiny-llama %.1f MiB)\n",
      peak / 1048576.0, bytes / 1048576.0, largest / 1048576.0, base / 1048576.0);
  EXPECT_LT(peak - base, largest + (int64_t{16} << 20));
}

// A file larger than the free space of the test folder's file system: exit 2 within a
// second, naming the size and the free space, and nothing written (no temporary file).
TEST(SdrtMakeStream, RefusesWhenTheFileSystemLacksTheSpace) {
  const std::string root = test::FreshDir("make_stream_space");
  struct statvfs st;
  ASSERT_EQ(statvfs(root.c_str(), &st), 0);
  const double free_bytes = static_cast<double>(st.f_bavail) * static_cast<double>(st.f_frsize);
  // llama-70b at scale 16 in float32: about 1 PB, more than any test machine has. Plain
  // llama-70b (141 GB in bfloat16) when this file system has less than that.
  std::vector<std::string> commands = {"make --arch llama-70b --scale 16 --dtype f32 "};
  if (free_bytes < 140e9) commands.push_back("make --arch llama-70b ");
  for (const std::string& command : commands) {
    SCOPED_TRACE(command);
    const auto start = std::chrono::steady_clock::now();
    const test::CommandResult r = Sdrt(command + root + "/big.safetensors");
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_LT(seconds, 1.0);
    EXPECT_THAT(r.out, IsEmpty());
    EXPECT_THAT(r.err, HasSubstr("sdrt make: " + root + "/big.safetensors needs "));
    EXPECT_THAT(r.err, HasSubstr(" GiB free on " + root));
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_TRUE(fs::is_empty(root)) << "something was written in " << root;
  }
  // A file system of no blocks at all (procfs) is named as such, not as 0 GiB free.
  const test::CommandResult proc = Sdrt("make /proc/sdrt-make-test.safetensors");
  EXPECT_EQ(proc.exit_code, 2) << proc.err;
  EXPECT_THAT(proc.err, HasSubstr("sdrt make: /proc/sdrt-make-test.safetensors: /proc is on a "
                                  "file system that holds no files (no blocks, as /proc)"));
}

}  // namespace
}  // namespace sdrt
