// `sdrt gather` and `sdrt load` as one process started without mpiexec: the one-rank
// session (tools/sdrt/internal/session.h), MPI's singleton start in a build with MPI, a
// SelfCommunicator in a build without it. This source is built twice: with
// SDRT_ONE_RANK_CUDA 0 on the CPU (label cpu), with 1 on CUDA (label gpu: NCCL with one
// rank on GPU 0, skipped without a device; what the device check runs on a machine
// without MPI).
// Shard (mesh 1) -> gather -> load --verify on the mixed state dict (every dtype, a 0-dim
// and a zero-element tensor), the gathered file compared with the source tensor by tensor.
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

using test::CommandResult;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(test::ShellQuote(SDRT_BINARY) + " " + args);
}

// Every tensor of `source` is in `out` with the same dtype, shape and bytes.
void ExpectSameTensors(const std::string& source, const std::string& out) {
  absl::StatusOr<SafetensorsFile> a = SafetensorsFile::Open(source);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<SafetensorsFile> b = SafetensorsFile::Open(out);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(b->entries().size(), a->entries().size());
  for (const SafetensorsEntry& x : a->entries()) {
    absl::StatusOr<Tensor> want = a->Get(x.name);
    absl::StatusOr<Tensor> got = b->Get(x.name);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << x.name << ": " << got.status();
    EXPECT_EQ(DTypeName(got->dtype()), DTypeName(want->dtype())) << x.name;
    EXPECT_EQ(got->shape(), want->shape()) << x.name;
    EXPECT_EQ(std::string(static_cast<const char*>(got->data_ptr()), got->nbytes()),
              std::string(static_cast<const char*>(want->data_ptr()), want->nbytes()))
        << x.name;
  }
}

// shard -> gather -> load --verify, the commands' tensors on `device`.
void RoundTrip(const std::string& device) {
  const std::string root = test::FreshDir(absl::StrCat("one_rank_cli_", device));
  const std::string source = root + "/mixed.safetensors";
  test::WriteSource(source, test::MixedStateDict());
  const std::string dir = root + "/ckpt";
  CommandResult shard = Sdrt(absl::StrCat("shard ", test::ShellQuote(source), " ",
                                          test::ShellQuote(dir), " --mesh 1 --plan fsdp"));
  ASSERT_EQ(shard.exit_code, 0) << shard.err;

  const std::string out = root + "/gathered.safetensors";
  CommandResult gather = Sdrt(absl::StrCat("gather ", test::ShellQuote(dir), " ",
                                           test::ShellQuote(out), " --device ", device, " --json"));
  ASSERT_EQ(gather.exit_code, 0) << gather.out << gather.err;
  const nlohmann::json g = nlohmann::json::parse(gather.out, nullptr, false);
  ASSERT_FALSE(g.is_discarded()) << gather.out;
  EXPECT_EQ(g.value("ranks", -1), 1) << g;
  EXPECT_EQ(g.value("device", ""), device) << g;
  EXPECT_TRUE(g.value("verified", false)) << g;
  ExpectSameTensors(source, out);

  CommandResult load =
      Sdrt(absl::StrCat("load ", test::ShellQuote(source), " --mesh 1 --plan fsdp --verify ",
                        test::ShellQuote(dir), " --device ", device, " --json"));
  ASSERT_EQ(load.exit_code, 0) << load.out << load.err;
  const nlohmann::json l = nlohmann::json::parse(load.out, nullptr, false);
  ASSERT_FALSE(l.is_discarded()) << load.out;
  EXPECT_EQ(l.value("ranks", -1), 1) << l;
  EXPECT_EQ(l.value("device", ""), device) << l;
  EXPECT_TRUE(l.value("bit_exact", false)) << l;
  EXPECT_EQ(l["mismatches"], nlohmann::json::array()) << l;
  if (!::testing::Test::HasFailure()) std::filesystem::remove_all(root);
}

#if SDRT_ONE_RANK_CUDA
TEST(OneRankCli, GatherAndLoadOnCudaWithoutMpiexec) {
  SDRT_SKIP_WITHOUT_GPU();
  RoundTrip("cuda");
}
#else
TEST(OneRankCli, GatherAndLoadOnCpuWithoutMpiexec) { RoundTrip("cpu"); }
#endif

}  // namespace
}  // namespace sdrt
