// A rank file of a sharded checkpoint that is truncated, garbled, taken from another
// checkpoint or whose tensor bytes do not hash to the index's xxh64: `sdrt inspect DIR`,
// `mpiexec -n 2 sdrt gather DIR OUT` and `mpiexec -n 2 sdrt load FILE --verify DIR` end with
// exit code 2 (bad input) and one line naming the rank file's path (the library's errors:
// LoadRankShards, CheckGatheredTensor, core/checkpoint/sharded_checkpoint.h), and gather
// writes nothing.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using test::CommandResult;
using test::ShellQuote;

// `sdrt ARGS` under coreutils' timeout (a hang fails the test with exit 124).
CommandResult Sdrt(const std::string& args) {
  return test::RunCommand("timeout 60 " + ShellQuote(SDRT_BINARY) + " " + args);
}

// `mpiexec -n 2 sdrt ARGS`.
CommandResult Mpi2(const std::string& args) {
  return test::RunCommand(absl::StrCat("timeout 60 ", ShellQuote(SDRT_MPIEXEC), " ",
                                       SDRT_MPIEXEC_NUMPROC_FLAG, " 2 ", ShellQuote(SDRT_BINARY),
                                       " ", args));
}

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

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// The byte offset in `path` (a safetensors file) of tensor `name`'s first byte.
int64_t DataOffset(const std::string& path, const std::string& name) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  if (!file.ok() || file->Find(name) == nullptr) return -1;
  return file->data_offset() + file->Find(name)->data_begin;
}

class BadRankFile : public ::testing::Test {
 protected:
  // tiny-llama (float32) sharded with `plan` on mesh 2 into a fresh folder; returns it.
  std::string Checkpoint(const std::string& name, const std::string& plan,
                         const std::string& make_args = "") {
    const std::string root = test::FreshDir("bad_rank_file_" + name);
    model_ = root + "/tiny.safetensors";
    CommandResult r = Sdrt("make --arch tiny-llama --dtype f32 " + make_args + " " + model_);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    r = Sdrt(absl::StrCat("shard ", model_, " ", root, "/ckpt --mesh 2 --plan ", plan));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    out_ = root + "/out.safetensors";
    return root + "/ckpt";
  }

  // inspect, gather and load --verify all refuse `dir` naming `path` (and `parts`).
  void ExpectEveryCommandRefuses(const std::string& dir, const std::string& path,
                                 const std::vector<std::string>& parts, bool inspect = true) {
    std::vector<std::string> all = parts;
    all.push_back(path);
    if (inspect) {
      SCOPED_TRACE("inspect");
      ExpectBadInput(Sdrt("inspect " + dir), all);
    }
    {
      SCOPED_TRACE("gather");
      ExpectBadInput(Mpi2(absl::StrCat("gather ", dir, " ", out_)), all);
      EXPECT_FALSE(fs::exists(out_));
    }
    {
      SCOPED_TRACE("load --verify");
      ExpectBadInput(Mpi2(absl::StrCat("load ", model_, " --mesh 2 --plan fsdp --verify ", dir)),
                     all);
    }
  }

  std::string model_;
  std::string out_;
};

TEST_F(BadRankFile, TruncatedRankFile) {
  const std::string dir = Checkpoint("truncated", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  const std::string bytes = ReadBytes(path);
  WriteBytes(path, bytes.substr(0, bytes.size() / 2));
  ExpectEveryCommandRefuses(dir, path, {});
}

TEST_F(BadRankFile, GarbageBytes) {
  const std::string dir = Checkpoint("garbage", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  WriteBytes(path, std::string(4096, '\x9c'));
  ExpectEveryCommandRefuses(dir, path, {});
}

// A rank file of another checkpoint (same mesh and plan, another model size).
TEST_F(BadRankFile, RankFileOfAnotherCheckpoint) {
  const std::string other = Checkpoint("foreign_other", "fsdp", "--scale 2");
  const std::string dir = Checkpoint("foreign", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  fs::copy_file(other + "/rank-00001-of-00002.safetensors", path,
                fs::copy_options::overwrite_existing);
  ExpectEveryCommandRefuses(dir, path, {"model."});
}

// A rank file of a checkpoint of the same shapes with other values (another seed): only the
// hashes differ, and gather names the rank files holding the first tensor that differs.
TEST_F(BadRankFile, RankFileOfACheckpointWithOtherValues) {
  const std::string other = Checkpoint("foreign_seed_other", "fsdp", "--seed 5");
  const std::string dir = Checkpoint("foreign_seed", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  fs::copy_file(other + "/rank-00001-of-00002.safetensors", path,
                fs::copy_options::overwrite_existing);
  ExpectBadInput(Mpi2(absl::StrCat("gather ", dir, " ", out_)),
                 {"tensor model.embed_tokens.weight", path, "index.json"});
  EXPECT_FALSE(fs::exists(out_));
}

// One byte of a sharded tensor's piece changed: only the gathered tensor's hash can tell;
// gather names the tensor and the rank files holding it.
TEST_F(BadRankFile, ShardedTensorWhoseHashDiffers) {
  const std::string dir = Checkpoint("sharded_hash", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  const int64_t at = DataOffset(path, "lm_head.weight");
  ASSERT_GT(at, 0);
  std::string bytes = ReadBytes(path);
  bytes[static_cast<size_t>(at)] ^= 0x40;
  WriteBytes(path, bytes);
  ExpectBadInput(
      Mpi2(absl::StrCat("gather ", dir, " ", out_)),
      {"tensor lm_head.weight", dir + "/rank-00000-of-00002.safetensors", path, "index.json"});
  EXPECT_FALSE(fs::exists(out_));
}

// One byte of a replicated tensor changed (plan tp keeps the norms whole on every rank):
// the rank file holding it is named by every command that loads it.
TEST_F(BadRankFile, ReplicatedTensorWhoseHashDiffers) {
  const std::string dir = Checkpoint("replicated_hash", "tp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  const int64_t at = DataOffset(path, "model.norm.weight");
  ASSERT_GT(at, 0);
  std::string bytes = ReadBytes(path);
  bytes[static_cast<size_t>(at)] ^= 0x40;
  WriteBytes(path, bytes);
  {
    SCOPED_TRACE("gather");
    ExpectBadInput(Mpi2(absl::StrCat("gather ", dir, " ", out_)),
                   {"rank 1", path, "model.norm.weight", "index.json"});
    EXPECT_FALSE(fs::exists(out_));
  }
  {
    SCOPED_TRACE("load --verify");
    ExpectBadInput(Mpi2(absl::StrCat("load ", model_, " --mesh 2 --plan tp --verify ", dir)),
                   {path, "model.norm.weight"});
  }
}

}  // namespace
}  // namespace sdrt
