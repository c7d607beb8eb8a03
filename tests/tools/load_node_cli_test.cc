// `sdrt load --read-once-per-node` (LoadOptions::share_reads), `--readers N`
// (LoadOptions::readers) under mpiexec -n 2 on one machine: the pieces are still checked bit
// for bit against the file; the replicated tensors of a tp plan are read once for the node
// (the bytes read on the node fall to the file's, from more), the JSON names each rank's
// node and what it received; either with --read root is bad input. `--map-results`
// (LoadOptions::map_results): fsdp's pieces are mapped, none read, still bit exact; tp's
// Shard(1) pieces read; with --read root, --direct-io or --read-once-per-node bad input.
#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;
using cli::HumanBytes;

// `sdrt make --dtype DTYPE` into a fresh folder named `name`; its file's path.
std::string MadeFile(const std::string& name, const std::string& dtype) {
  const std::string file = test::FreshDir(name) + "/tiny.safetensors";
  EXPECT_EQ(test::RunSdrt("make --dtype " + dtype + " " + test::ShellQuote(file)).exit_code, 0);
  return file;
}

int64_t Sum(const Json& values) {
  int64_t sum = 0;
  for (const Json& v : values) sum += v.get<int64_t>();
  return sum;
}

TEST(LoadNodeCli, ReadOncePerNodeReadsReplicatedTensorsOnce) {
  const std::string file = MadeFile("load_node_cli", "bf16");
  const std::string load = "load " + test::ShellQuote(file) + " --mesh 2 --plan tp --json";
  const test::CommandResult own = test::RunSdrtMpi(2, load + " --read all");
  ASSERT_EQ(own.exit_code, 0) << own.all();
  const test::CommandResult shared =
      test::RunSdrtMpi(2, load + " --read all --read-once-per-node");
  ASSERT_EQ(shared.exit_code, 0) << shared.all();
  const Json o = Json::parse(own.out);
  const Json s = Json::parse(shared.out);
  EXPECT_TRUE(s.value("bit_exact", false)) << s;
  EXPECT_EQ(s["bytes_kept"], o["bytes_kept"]);
  EXPECT_FALSE(o.contains("bytes_read_per_node")) << o;
  EXPECT_FALSE(o.contains("read_once_per_node")) << o;
  EXPECT_EQ(s["read_once_per_node"], true) << s;
  EXPECT_EQ(s["node_of_rank"], Json::array({0, 0})) << s;
  ASSERT_EQ(s["bytes_read_per_node"].size(), 1u) << s;
  const int64_t file_bytes = s["bytes"].get<int64_t>();
  // Without the flag every rank reads the replicated tensors (norms, biases): more than the
  // file; with it the node reads each byte once (gaps read through: at most 1/32 more).
  EXPECT_GT(Sum(o["bytes_read"]), file_bytes) << o;
  EXPECT_EQ(s["bytes_read_per_node"][0].get<int64_t>(), Sum(s["bytes_read"])) << s;
  EXPECT_LE(Sum(s["bytes_read"]), file_bytes + file_bytes / 32) << s;
  EXPECT_GE(Sum(s["bytes_read"]), file_bytes) << s;
  EXPECT_EQ(Sum(s["bytes_read"]) + Sum(s["bytes_from_node"]), Sum(o["bytes_read"])) << s << o;
  // The text summary says the same: one node, what it read, what each rank got from it.
  const test::CommandResult text = test::RunSdrtMpi(
      2, "load " + test::ShellQuote(file) + " --mesh 2 --plan tp --read all --read-once-per-node");
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_THAT(text.out, HasSubstr("  read once per node: 1 node, read there: " +
                                  HumanBytes(s["bytes_read_per_node"][0].get<int64_t>()) +
                                  "; per rank, from a rank of its node: " +
                                  HumanBytes(s["bytes_from_node"][0].get<int64_t>()) + " " +
                                  HumanBytes(s["bytes_from_node"][1].get<int64_t>()) + "\n"))
      << text.out;
  // Refused while the options are parsed, before MPI: one process (see SeveralReadersPerRank).
  const test::CommandResult bad = test::RunSdrt(load + " --read root --read-once-per-node");
  EXPECT_EQ(bad.exit_code, 2) << bad.all();
  EXPECT_THAT(bad.err, HasSubstr("--read-once-per-node goes with --read all"));
  if (!HasFailure()) std::filesystem::remove_all(std::filesystem::path(file).parent_path());
}

// --read-once-per-node, --map-results and --readers where nothing is read by every rank (a
// sharded folder: each rank its own rank files) are said to be unused, in the text and the
// JSON, not dropped in silence; --read root and --direct-io, which cannot apply there, are
// bad input naming the option.
TEST(LoadNodeCli, ReadOncePerNodeSaysWhenItIsNotUsed) {
  const std::string file = MadeFile("load_node_unused_cli", "f32");
  const std::string folder = std::filesystem::path(file).parent_path().string() + "/fsdp";
  ASSERT_EQ(test::RunSdrt("shard " + test::ShellQuote(file) + " " + test::ShellQuote(folder) +
                          " --mesh 2 --plan fsdp")
                .exit_code,
            0);
  const std::string load =
      "load " + test::ShellQuote(folder) + " --mesh 2 --plan tp --read all --read-once-per-node";
  const test::CommandResult text = test::RunSdrtMpi(2, load);
  ASSERT_EQ(text.exit_code, 0) << text.all();
  EXPECT_THAT(text.out,
              HasSubstr("\n  --read-once-per-node not used: each rank reads its own rank files\n"))
      << text.out;
  const test::CommandResult json = test::RunSdrtMpi(2, load + " --json");
  ASSERT_EQ(json.exit_code, 0) << json.all();
  const Json j = Json::parse(json.out);
  EXPECT_EQ(j["read_once_per_node"], false) << j;
  EXPECT_FALSE(j.contains("bytes_read_per_node")) << j;
  const test::CommandResult others = test::RunSdrtMpi(
      2, "load " + test::ShellQuote(folder) + " --mesh 2 --plan tp --map-results --readers 2");
  ASSERT_EQ(others.exit_code, 0) << others.all();
  EXPECT_THAT(others.out, HasSubstr("\n  --readers not used: each rank reads its own rank files\n"
                                    "  --map-results not used: each rank reads its own rank "
                                    "files\n"))
      << others.out;
  for (const auto& [flag, says] :
       {std::pair<const char*, const char*>{" --read root", "--read root does not apply to an "
                                                            "sdrt sharded folder"},
        {" --direct-io", "--direct-io does not apply to an sdrt sharded folder"}}) {
    const test::CommandResult bad =
        test::RunSdrtMpi(2, "load " + test::ShellQuote(folder) + " --mesh 2 --plan tp" + flag);
    EXPECT_EQ(bad.exit_code, 2) << bad.all();
    EXPECT_THAT(bad.err, HasSubstr(says)) << bad.err;
  }
  if (!HasFailure()) std::filesystem::remove_all(std::filesystem::path(file).parent_path());
}

// --readers N: N threads per rank read at once, the pieces still bit for bit the file's;
// out of [1, 64], or with --read root, bad input.
TEST(LoadNodeCli, SeveralReadersPerRank) {
  const std::string file = MadeFile("load_readers_cli", "f32");
  const std::string load = "load " + test::ShellQuote(file) + " --mesh 2 --plan fsdp --json";
  const test::CommandResult r = test::RunSdrtMpi(2, load + " --read all --readers 3");
  ASSERT_EQ(r.exit_code, 0) << r.all();
  EXPECT_TRUE(Json::parse(r.out).value("bit_exact", false)) << r.out;
  // Refused while the options are parsed, before MPI: one process tells (a job of ranks
  // that all end before MPI starts once ended with hydra's own SIGPIPE, exit 141).
  for (const char* bad : {" --readers -1", " --readers 65", " --read root --readers 2",
                          " --read root --readers 0"}) {
    const test::CommandResult b = test::RunSdrt(load + bad);
    EXPECT_EQ(b.exit_code, 2) << bad << ": " << b.all();
  }
  if (!HasFailure()) std::filesystem::remove_all(std::filesystem::path(file).parent_path());
}

TEST(LoadNodeCli, MapResultsMapsContiguousPiecesAndReadsTheRest) {
  const std::string file = MadeFile("load_map_cli", "f32");
  const std::string load = "load " + test::ShellQuote(file) + " --mesh 2 --json --read all";
  const test::CommandResult fsdp = test::RunSdrtMpi(2, load + " --plan fsdp --map-results");
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.all();
  const Json f = Json::parse(fsdp.out);
  EXPECT_TRUE(f.value("bit_exact", false)) << f;
  EXPECT_EQ(f["bytes_mapped"], f["bytes_kept"]) << f;  // Shard(0) pieces: all one range
  EXPECT_EQ(Sum(f["bytes_read"]), 0) << f;
  const test::CommandResult tp = test::RunSdrtMpi(2, load + " --plan tp --map-results");
  ASSERT_EQ(tp.exit_code, 0) << tp.all();
  const Json t = Json::parse(tp.out);
  EXPECT_TRUE(t.value("bit_exact", false)) << t;
  EXPECT_GT(Sum(t["bytes_read"]), 0) << t;  // the row-parallel weights' Shard(1) pieces
  EXPECT_GT(Sum(t["bytes_mapped"]), 0) << t;
  EXPECT_EQ(Sum(t["bytes_mapped"]) + Sum(t["bytes_read"]), Sum(t["bytes_kept"])) << t;
  const test::CommandResult plain = test::RunSdrtMpi(2, load + " --plan tp");
  ASSERT_EQ(plain.exit_code, 0) << plain.all();
  EXPECT_FALSE(Json::parse(plain.out).contains("bytes_mapped")) << plain.out;
  // Refused while the options are parsed, before MPI: one process (a 2-rank job whose ranks
  // all end before MPI starts ended once with hydra's SIGPIPE, exit 141, in a cold start).
  for (const char* bad : {" --read root", " --direct-io", " --read-once-per-node"}) {
    const test::CommandResult b = test::RunSdrt("load " + test::ShellQuote(file) +
                                                " --mesh 2 --plan tp" + bad + " --map-results");
    EXPECT_EQ(b.exit_code, 2) << bad << ": " << b.all();
    EXPECT_THAT(b.err, HasSubstr("--map-results goes with --read all")) << bad;
  }
  if (!HasFailure()) std::filesystem::remove_all(std::filesystem::path(file).parent_path());
}

}  // namespace
}  // namespace sdrt
