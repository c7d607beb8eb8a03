// A rank file of a sharded checkpoint that is truncated, garbled, taken from another
// checkpoint or whose tensor bytes do not hash to what was written, and an index.json edited
// after the rank files were written: `sdrt inspect DIR`, `mpiexec -n 2 sdrt gather DIR OUT`,
// `mpiexec -n 2 sdrt load FILE --verify DIR`, `mpiexec -n 2 sdrt load DIR` and `mpiexec -n 2
// sdrt reshard DIR OUT` end with exit code 2 (bad input) and one line naming the rank file's
// path (the library's errors: LoadRankShards, CheckGatheredTensor,
// core/checkpoint/sharded_checkpoint.h), and gather and reshard write nothing.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
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

  // `mpiexec -n 2 sdrt reshard DIR` refuses `dir` naming `parts`, and writes nothing: no
  // OUTDIR, no temporary folder beside it.
  void ExpectReshardRefuses(const std::string& dir, const std::vector<std::string>& parts) {
    SCOPED_TRACE("reshard");
    const fs::path out = fs::path(dir).parent_path() / "resharded";
    ExpectBadInput(Mpi2(absl::StrCat("reshard ", dir, " ", out.string(), " --mesh 2 --plan tp")),
                   parts);
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(out.parent_path())) {
      EXPECT_EQ(e.path().filename().string().find(".resharded.tmp"), std::string::npos) << e.path();
    }
  }

  // inspect, gather, load --verify and reshard all refuse `dir` naming `path` (and `parts`).
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
    ExpectReshardRefuses(dir, all);
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

// The library's verdict (the rank that failed, agreed inside LoadStateDict) is the command's
// error as it is: the ranks are named once, not again by the command's own agreement.
TEST_F(BadRankFile, LoadingTheFolderNamesTheFailingRankOnce) {
  const std::string dir = Checkpoint("load_truncated", "tp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  const std::string bytes = ReadBytes(path);
  WriteBytes(path, bytes.substr(0, bytes.size() - 1000));
  const CommandResult r = Mpi2(absl::StrCat("load ", dir, " --mesh 2 --plan tp"));
  ExpectBadInput(r, {path});
  EXPECT_EQ(r.err.rfind("sdrt load: LoadStateDict: rank 1: rank file 1 of 2: " + path, 0), 0)
      << r.err;
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

// A rank file of a checkpoint of the same shapes with other values (another seed): it was
// written with another index.json (other full-tensor hashes), which every command that
// reads it names, with the file.
TEST_F(BadRankFile, RankFileOfACheckpointWithOtherValues) {
  const std::string other = Checkpoint("foreign_seed_other", "fsdp", "--seed 5");
  const std::string dir = Checkpoint("foreign_seed", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  fs::copy_file(other + "/rank-00001-of-00002.safetensors", path,
                fs::copy_options::overwrite_existing);
  ExpectEveryCommandRefuses(dir, path, {"written with another index", "index.json"});
}

// One byte of a sharded tensor's piece changed: the piece's hash, recorded in its rank file,
// tells as soon as the piece is read; every command that reads it names the file and the
// tensor (inspect reads no tensor byte).
TEST_F(BadRankFile, ShardedTensorWhoseHashDiffers) {
  const std::string dir = Checkpoint("sharded_hash", "fsdp");
  const std::string path = dir + "/rank-00001-of-00002.safetensors";
  const int64_t at = DataOffset(path, "lm_head.weight");
  ASSERT_GT(at, 0);
  std::string bytes = ReadBytes(path);
  bytes[static_cast<size_t>(at)] ^= 0x40;
  WriteBytes(path, bytes);
  ExpectEveryCommandRefuses(dir, path, {"tensor lm_head.weight", "sdrt.piece_xxh64"},
                            /*inspect=*/false);
}

// index.json edited after the rank files were written: a placement swapped for one with the
// same local shapes (q_proj's S(0) over 2 ranks becomes _S(0, 2): 32 of its 64 rows on
// each rank either way, other rows), or a full tensor's hash changed. Before, `sdrt
// reshard` wrote a new folder carrying the edited index; now every command refuses it,
// naming the rank file and index.json.
TEST_F(BadRankFile, EditedIndex) {
  const std::string dir = Checkpoint("edited_index", "tp");
  const std::string index_path = dir + "/index.json";
  const std::string original = ReadBytes(index_path);
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  nlohmann::json index = nlohmann::json::parse(original);
  for (nlohmann::json& t : index["tensors"]) {
    if (t["name"] == q) {
      ASSERT_EQ(t["placements"], "[S(0)]");
      ASSERT_EQ(t["shape"][0], 64);
      t["placements"] = "[_S(0, 2)]";
    }
  }
  WriteBytes(index_path, index.dump(1));
  ExpectEveryCommandRefuses(dir, dir + "/rank-00000-of-00002.safetensors",
                            {"written with another index", "index.json"});
  index = nlohmann::json::parse(original);
  for (nlohmann::json& t : index["tensors"]) {
    if (t["name"] == q) t["xxh64"] = "0123456789abcdef";
  }
  WriteBytes(index_path, index.dump(1));
  ExpectReshardRefuses(dir, {dir + "/rank-00000-of-00002.safetensors", "index.json"});
  // The original index reads again: nothing else was touched.
  WriteBytes(index_path, original);
  CommandResult r = Mpi2(absl::StrCat("reshard ", dir, " ", dir, "-fsdp --mesh 2 --plan fsdp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
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

// A folder written before piece hashes (format 1: index.json and rank files say 1, the rank
// files lack sdrt.index_xxh64 and sdrt.piece_xxh64) still reshards: rank 0 says once what
// is not checked, and the new folder is format 2, its pieces hashed as written.
TEST_F(BadRankFile, FormatOneFolderReshardsWithOneWarning) {
  const std::string dir = Checkpoint("format_one", "fsdp");
  nlohmann::json index = nlohmann::json::parse(ReadBytes(dir + "/index.json"));
  index["format_version"] = 1;
  WriteBytes(dir + "/index.json", index.dump(1));
  for (const std::string name :
       {"rank-00000-of-00002.safetensors", "rank-00001-of-00002.safetensors"}) {
    const std::string path = dir + "/" + name;
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> metadata;
    {
      absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
      ASSERT_TRUE(file.ok()) << file.status();
      for (const SafetensorsEntry& e : file->entries()) {
        tensors.emplace_back(e.name, *file->Get(e.name)->Clone());
      }
      metadata = file->metadata();
    }
    metadata.erase("sdrt.index_xxh64");
    metadata.erase("sdrt.piece_xxh64");
    metadata["sdrt.format_version"] = "1";
    ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  }
  const std::string out = dir + "-tp";
  CommandResult r = Mpi2(absl::StrCat("reshard ", dir, " ", out, " --mesh 2 --plan tp"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string warning = "sdrt reshard: warning: " + dir +
                              ": format 1 rank files carry no "
                              "piece hashes";
  EXPECT_THAT(r.err, HasSubstr(warning));
  EXPECT_EQ(r.err.find("warning"), r.err.rfind("warning")) << r.err;
  CommandResult inspect = Sdrt("inspect " + out);
  EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
  EXPECT_THAT(inspect.out, HasSubstr("sharded checkpoint (format 2)"));
}

}  // namespace
}  // namespace sdrt
