// Packed and microscaling dtypes end to end through the CLI, on files PyTorch's safetensors
// wrote (tests/golden/make_subbyte_golden.py, tests/data/subbyte/): `sdrt inspect`, `sdrt
// shard`, `mpiexec -n N sdrt gather` and `mpiexec -n N sdrt load`. The test runs once (not
// under mpiexec) and starts mpiexec itself.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/core/io/safetensors_test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using ::testing::HasSubstr;

const std::string kData = std::string(SDRT_TEST_DATA_DIR) + "/subbyte";

std::string Quote(const std::string& s) { return test::ShellQuote(s); }

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(Quote(SDRT_BINARY) + " " + args);
}

CommandResult Mpi(int ranks, const std::string& args) {
  return test::RunCommand(absl::StrCat(Quote(SDRT_MPIEXEC), " ", SDRT_MPIEXEC_NUMPROC_FLAG, " ",
                                       ranks, " ", Quote(SDRT_BINARY), " ", args));
}

// What PyTorch wrote, per tensor: the bytes as hex (expected.json).
nlohmann::json Expected(const std::string& file) {
  std::ifstream in(kData + "/expected.json");
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str())[file];
}

// Every tensor of `path` has the dtype code, shape and bytes PyTorch wrote into `file`.
void ExpectTorchBytes(const std::string& path, const std::string& file) {
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  const nlohmann::json want = Expected(file);
  ASSERT_EQ(f->entries().size(), want.size()) << path;
  for (const auto& [name, e] : want.items()) {
    const SafetensorsEntry* got = f->Find(name);
    ASSERT_NE(got, nullptr) << path << ": " << name;
    EXPECT_EQ(SafetensorsCode(got->dtype), e["dtype"].get<std::string>()) << name;
    EXPECT_EQ(std::vector<int64_t>(got->shape.begin(), got->shape.end()),
              e["shape"].get<std::vector<int64_t>>())
        << name;
    absl::StatusOr<Tensor> t = f->Get(name);
    ASSERT_TRUE(t.ok()) << t.status();
    const auto* p = static_cast<const unsigned char*>(t->data_ptr());
    std::string hex;
    for (int64_t k = 0; k < t->nbytes(); ++k)
      absl::StrAppend(&hex, absl::Hex(p[k], absl::kZeroPad2));
    EXPECT_EQ(hex, e["hex"].get<std::string>()) << path << ": " << name << " is not bit-exact";
  }
}

// shard SRC over `ranks` with `plan`, check every rank file element by element against the
// source (test::ExpectRoundTrip's bit-level oracle), gather it back under mpiexec and
// compare with what PyTorch wrote; then load SRC with the plan, reading on every rank and
// through rank 0, each rank's pieces compared with the rank files.
void RoundTrip(const std::string& name, int ranks, const std::string& plan) {
  SCOPED_TRACE(absl::StrCat(name, " over ", ranks, " ranks, plan ", plan));
  const std::string source = kData + "/" + name;
  const std::string root =
      test::FreshDir(absl::StrCat("subbyte_cli_", fs::path(name).stem().string(), "_", ranks, "_",
                                  fs::path(plan).stem().string()));
  const std::string dir = root + "/ckpt";
  CommandResult shard = Sdrt(absl::StrCat("shard ", Quote(source), " ", Quote(dir), " --mesh ",
                                          ranks, " --plan ", Quote(plan)));
  ASSERT_EQ(shard.exit_code, 0) << shard.out << shard.err;
  test::ExpectRoundTrip(dir, *SafetensorsFile::Open(source));
  const std::string out = root + "/gathered.safetensors";
  CommandResult gather = Mpi(ranks, absl::StrCat("gather ", Quote(dir), " ", Quote(out)));
  ASSERT_EQ(gather.exit_code, 0) << gather.out << gather.err;
  ExpectTorchBytes(out, name);
  for (const char* read : {"all", "root"}) {
    CommandResult load =
        Mpi(ranks, absl::StrCat("load ", Quote(source), " --mesh ", ranks, " --plan ", Quote(plan),
                                " --verify ", Quote(dir), " --read ", read, " --json"));
    ASSERT_EQ(load.exit_code, 0) << load.out << load.err;
    const nlohmann::json j = nlohmann::json::parse(load.out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << load.out;
    EXPECT_TRUE(j.value("bit_exact", false)) << j;
    EXPECT_EQ(j.value("read", ""), read) << j;
  }
}

// A PLAN.json in a folder of its own (the tests may run in parallel).
std::string WritePlan(const std::string& name, const std::string& json) {
  const std::string path =
      test::FreshDir("subbyte_cli_plan_" + fs::path(name).stem().string()) + "/" + name;
  std::ofstream(path) << json;
  return path;
}

TEST(SubByteCli, InspectPrintsTheDTypesAsPyTorchDoes) {
  ExpectTorchBytes(kData + "/case055.safetensors", "case055.safetensors");
  ExpectTorchBytes(kData + "/mxfp4.safetensors", "mxfp4.safetensors");
  CommandResult r = Sdrt("inspect " + Quote(kData + "/case055.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("float8_e8m0fnu    [4, 3]     12"));
  EXPECT_THAT(r.out, HasSubstr("float4_e2m1fn_x2  [4, 8]     16"));
  r = Sdrt("inspect --json " + Quote(kData + "/mxfp4.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"F8_E8M0\""));
}

// case-055: F8_E8M0 [4, 3] and F4 [4, 8] (PyTorch's float4_e2m1fn_x2 [4, 4]) written by
// PyTorch: sharded on dim 0 over 2 ranks and gathered back bit-exact; on dim 1 over 2 ranks
// (2 bytes a row each) too; on dim 1 over 3 ranks a piece would cut a byte: exit 2, naming
// the tensor, the placement, the pieces and the rule, and nothing written.
TEST(SubByteCli, Case055ShardOnDim0AndGatherBitExactCutInsideAByteIsAnError) {
  RoundTrip("case055.safetensors", 2, "fsdp");
  RoundTrip("case055.safetensors", 2,
            WritePlan("dim1.json", R"({"rules": [{"pattern": "^w$", "placements": "[S(1)]"}]})"));
  const std::string out = test::FreshDir("subbyte_cli_case055_bad") + "/ckpt";
  CommandResult r = Sdrt(absl::StrCat(
      "shard ", Quote(kData + "/case055.safetensors"), " ", Quote(out), " --mesh 3 --plan ",
      Quote(
          WritePlan("dim1_3.json", R"({"rules": [{"pattern": "^w$", "placements": "[S(1)]"}]})"))));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("tensor 'w' (float4_e2m1fn_x2 [4, 8]): Shard(1) over 3 ranks gives "
                               "pieces of 3, 3, 2 elements along dim 1; a 4-bit element cannot "
                               "be cut inside a byte"));
  EXPECT_FALSE(fs::exists(out));
  // The load refuses the same plan on every rank before reading.
  const std::string bad_plan =
      WritePlan("dim1_3l.json", R"({"rules": [{"pattern": "^w$", "placements": "[S(1)]"}]})");
  r = Mpi(3, absl::StrCat("load ", Quote(kData + "/case055.safetensors"), " --mesh 3 --plan ",
                          Quote(bad_plan), " --read all"));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("Shard(1) over 3 ranks gives pieces of 3, 3, 2 elements along "
                               "dim 1; a 4-bit element cannot be cut inside a byte"));
}

// A piece of half a byte (one 4-bit element): the load's layout refuses it naming the tensor,
// under a plan and under a parallel layout description alike, before any local is made.
TEST(SubByteCli, APieceOfHalfAByteIsRefusedNamingTheTensor) {
  const std::string file = test::FreshDir("subbyte_cli_half_byte") + "/f4.safetensors";
  const std::string header = R"({"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})";
  std::ofstream(file, std::ios::binary) << test::Image(header, "\x21");
  for (const char* plan : {"fsdp", "fsdp:dp=2"}) {
    const CommandResult r = Mpi(2, absl::StrCat("load ", Quote(file), " --mesh 2 --plan ", plan));
    EXPECT_EQ(r.exit_code, 2) << plan << ": " << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("tensor 'a' (float4_e2m1fn_x2 [2]): Shard(0) over 2 ranks gives "
                                 "pieces of 1, 1 elements along dim 0; a 4-bit element cannot be "
                                 "cut inside a byte"))
        << plan;
  }
}

// A sharded checkpoint whose index.json was edited to cut `w` inside a byte: `sdrt gather`
// refuses it when reading the index (exit 2), before any rank file is read.
TEST(SubByteCli, AnEditedIndexThatCutsAByteIsRefusedByGather) {
  const std::string root = test::FreshDir("subbyte_cli_edited_index");
  const std::string dir = root + "/ckpt";
  CommandResult shard = Sdrt(absl::StrCat("shard ", Quote(kData + "/case055.safetensors"), " ",
                                          Quote(dir), " --mesh 3 --plan fsdp"));
  ASSERT_EQ(shard.exit_code, 0) << shard.err;
  std::ifstream in(dir + "/index.json");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json index = nlohmann::json::parse(text.str());
  for (nlohmann::json& t : index["tensors"]) {
    if (t["name"] == "w") t["placements"] = "[S(1)]";
  }
  std::ofstream(dir + "/index.json") << index.dump(1);
  CommandResult r =
      Mpi(3, absl::StrCat("gather ", Quote(dir), " ", Quote(root + "/out.safetensors")));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("tensor 'w' (float4_e2m1fn_x2 [4, 8]): Shard(1) over 3 ranks gives "
                               "pieces of 3, 3, 2 elements along dim 1"));
  EXPECT_FALSE(fs::exists(root + "/out.safetensors"));
}

// gpt-oss's MXFP4 experts (uint8 blocks and scales, and float8_e8m0fnu scales): experts
// split on dim 0 (4 over 3 ranks: 2, 2, 0), scales and biases on dim 1, into 2 and 3 ranks.
TEST(SubByteCli, Mxfp4ExpertsLoadShardAndGatherBitExact) {
  const std::string plan = WritePlan("mxfp4.json", R"({"rules": [
      {"pattern": "\\.blocks$", "placements": "[S(0)]"},
      {"pattern": "\\.scales$", "placements": "[S(1)]"},
      {"pattern": "_bias$", "placements": "[S(1)]"}]})");
  for (int ranks : {2, 3}) {
    RoundTrip("mxfp4.safetensors", ranks, plan);
    RoundTrip("mxfp4.safetensors", ranks, "fsdp");
  }
}

}  // namespace
}  // namespace sdrt
