// The exit-code contract of the `sdrt` tool (docs/CLI.md, "Exit codes"), run as the built
// binary: every command, and the top level, given a bad argument (an unknown flag, a
// missing required argument, a bad value, a missing file) exits with 2 and prints one line
// on stderr and nothing on stdout; under `mpiexec -n 2` the multi-rank commands print that
// line once (rank 0) and every rank exits with 2.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::ShellQuote;
using ::testing::HasSubstr;
using ::testing::StartsWith;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(ShellQuote(SDRT_BINARY) + " " + args);
}

// Exit code 2, nothing on stdout, one line on stderr starting "sdrt" and naming `part`.
void ExpectBadArgument(const CommandResult& r, const std::string& part) {
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line:\n" << r.err;
  EXPECT_THAT(r.err, StartsWith("sdrt"));
  EXPECT_THAT(r.err, HasSubstr(part));
}

struct Case {
  std::string args;  // after `sdrt`
  std::string part;  // what the error line names
};

class ExitCodes : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::FreshDir(absl::StrCat(
        "exit_codes_", ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    source_ = root_ + "/tiny.safetensors";
    ASSERT_EQ(Sdrt("make " + ShellQuote(source_)).exit_code, 0);
    ckpt_ = root_ + "/ckpt";
    ASSERT_EQ(
        Sdrt("shard " + ShellQuote(source_) + " " + ShellQuote(ckpt_) + " --mesh 2 --plan fsdp")
            .exit_code,
        0);
    missing_ = root_ + "/missing.safetensors";
  }

  std::string Q(const std::string& s) const { return ShellQuote(s); }

  std::string root_, source_, ckpt_, missing_;
};

TEST_F(ExitCodes, TopLevel) {
  ExpectBadArgument(Sdrt(""), "a command is required");
  ExpectBadArgument(Sdrt("--bogus"), "--bogus");
  ExpectBadArgument(Sdrt("frobnicate"), "frobnicate");
  const CommandResult version = Sdrt("--version");
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_THAT(version.out, StartsWith("sdrt "));
}

// `sdrt --version CMD` is refused before CMD runs (it used to run CMD and exit 0 whatever
// CMD returned).
TEST_F(ExitCodes, VersionWithACommandIsRefused) {
  ExpectBadArgument(Sdrt("--version inspect " + Q(missing_)), "--version takes no command");
  ExpectBadArgument(Sdrt("--version make " + Q(root_ + "/made.safetensors")), "make");
  EXPECT_FALSE(fs::exists(root_ + "/made.safetensors")) << "the command ran";
}

TEST_F(ExitCodes, Inspect) {
  std::ofstream(root_ + "/garbage.safetensors") << "not a safetensors file";
  for (const Case& c : std::vector<Case>{
           {"inspect --bogus " + Q(source_), "--bogus"},
           {"inspect", "FILE|DIR is required"},
           {"inspect " + Q(root_ + "/garbage.safetensors"), root_ + "/garbage.safetensors"},
           {"inspect " + Q(missing_), missing_}}) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
}

TEST_F(ExitCodes, Shard) {
  const std::string out = Q(root_ + "/out");
  for (const Case& c : std::vector<Case>{
           {"shard " + Q(source_) + " " + out + " --mesh 2 --plan fsdp --bogus", "--bogus"},
           {"shard " + Q(source_) + " " + out + " --plan fsdp", "--mesh is required"},
           {"shard " + Q(source_) + " " + out + " --mesh 2xq --plan fsdp", "2xq"},
           {"shard " + Q(missing_) + " " + out + " --mesh 2 --plan fsdp", missing_}}) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  EXPECT_FALSE(fs::exists(root_ + "/out"));
}

TEST_F(ExitCodes, Make) {
  const std::string out = Q(root_ + "/x.safetensors");
  for (const Case& c :
       std::vector<Case>{{"make --bogus " + out, "--bogus"},
                         {"make", "OUT is required"},
                         {"make --dtype f8 " + out, "--dtype"},
                         {"make " + Q(root_ + "/no/such/x.safetensors"), root_ + "/no/such"},
                         {"make " + Q(root_ + "/newdir/"), "ends in '/': sdrt make writes one"},
                         {"make --scale 0x1p-3 " + out, "must be a decimal number"}}) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  EXPECT_FALSE(fs::exists(root_ + "/x.safetensors"));
}

TEST_F(ExitCodes, Demo) {
  const std::string cache = " --cache-dir " + Q(root_ + "/cache");
  for (const Case& c : std::vector<Case>{{"demo --bogus" + cache, "--bogus"},
                                         {"demo" + cache + " --checkpoint", "--checkpoint"},
                                         {"demo --ranks 0" + cache, "--ranks"},
                                         {"demo --ranks many" + cache, "many"},
                                         {"demo --checkpoint " + Q(missing_) + cache, missing_}}) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
}

// The multi-rank commands' bad arguments (paths unquoted), each with what its error names.
std::vector<Case> GatherCases(const std::string& ckpt, const std::string& out,
                              const std::string& missing) {
  const std::string q_ckpt = ShellQuote(ckpt);
  const std::string q_out = ShellQuote(out);
  return {{"gather " + q_ckpt + " " + q_out + " --bogus", "--bogus"},
          {"gather " + q_ckpt, "OUT is required"},
          {"gather " + q_ckpt + " " + q_out + " --bucket-mib 0", "--bucket-mib"},
          {"gather " + ShellQuote(missing) + " " + q_out, missing}};
}

std::vector<Case> LoadCases(const std::string& source, const std::string& missing) {
  return {{"load " + ShellQuote(source) + " --mesh 2 --plan fsdp --bogus", "--bogus"},
          {"load " + ShellQuote(source) + " --plan fsdp", "--mesh is required"},
          {"load " + ShellQuote(source) + " --mesh 2 --plan zero3", "zero3"},
          {"load " + ShellQuote(source) + " --mesh 2 --plan fsdp --device tpu", "--device"},
          {"load " + ShellQuote(missing) + " --mesh 2 --plan fsdp", missing}};
}

// The options every source takes, checked for a sharded folder too: CLI11 refuses --read and
// --bucket-mib (the size as given, never a negative byte count), the library --direct-io
// and --read root (its rank files are mapped, on every rank).
std::vector<Case> ShardedLoadCases(const std::string& ckpt) {
  const std::string load = "load " + ShellQuote(ckpt) + " --mesh 2 --plan fsdp";
  return {{load + " --read bogus", "--read: bogus not in {auto,all,root}"},
          {load + " --bucket-mib 8796093022208",
           "--bucket-mib: must be a number in [1/16384, 1048576] (MiB), got 8796093022208"},
          {load + " --bucket-mib nan", "--bucket-mib"},
          {load + " --direct-io", "--direct-io does not apply to an sdrt sharded folder"},
          {load + " --read root", "every rank reads its own rank files"}};
}

// `sdrt reshard`'s bad command lines: CLI11's and the plan's.
std::vector<Case> ReshardCases(const std::string& ckpt, const std::string& out) {
  const std::string reshard = "reshard " + ShellQuote(ckpt) + " " + ShellQuote(out);
  return {{reshard + " --mesh 2 --plan fsdp --bogus", "--bogus"},
          {"reshard " + ShellQuote(ckpt), "OUTDIR is required"},
          {reshard + " --mesh 2 --plan fsdp --bucket-mib 0", "--bucket-mib"},
          {reshard + " --mesh 2 --plan zero3", "zero3"}};
}

TEST_F(ExitCodes, GatherAndLoadInOneProcess) {
  for (const Case& c : GatherCases(ckpt_, root_ + "/gathered.safetensors", root_ + "/missing")) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  // One process is a world of 1: --mesh 1.
  for (Case c : LoadCases(source_, missing_)) {
    SCOPED_TRACE(c.args);
    const size_t mesh = c.args.find("--mesh 2");
    if (mesh != std::string::npos) c.args.replace(mesh, 8, "--mesh 1");
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  for (Case c : ShardedLoadCases(ckpt_)) {
    SCOPED_TRACE(c.args);
    c.args.replace(c.args.find("--mesh 2"), 8, "--mesh 1");
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  for (const Case& c : ReshardCases(ckpt_, root_ + "/resharded")) {
    SCOPED_TRACE(c.args);
    ExpectBadArgument(Sdrt(c.args), c.part);
  }
  EXPECT_FALSE(fs::exists(root_ + "/gathered.safetensors"));
  EXPECT_FALSE(fs::exists(root_ + "/resharded"));
}

#if SDRT_CLI_HAVE_MPIEXEC
std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `mpiexec -n RANKS sdrt ARGS`; each rank records its own exit code in `rc_dir`/rc.<PMI_RANK>,
// returned in `rank_codes` (-1 for a rank that recorded nothing).
CommandResult MpiPerRank(int ranks, const std::string& args, const std::string& rc_dir,
                         std::vector<int>* rank_codes) {
  fs::remove_all(rc_dir);
  fs::create_directories(rc_dir);
  const std::string script = absl::StrCat("\"$0\" \"$@\"; rc=$?; echo $rc > ", ShellQuote(rc_dir),
                                          "/rc.$PMI_RANK; exit $rc");
  CommandResult r =
      test::RunCommand(absl::StrCat(ShellQuote(SDRT_MPIEXEC), " -n ", ranks, " sh -c ",
                                    ShellQuote(script), " ", ShellQuote(SDRT_BINARY), " ", args));
  rank_codes->assign(static_cast<size_t>(ranks), -1);
  for (int q = 0; q < ranks; ++q) {
    const std::string text = ReadBytes(absl::StrCat(rc_dir, "/rc.", q));
    if (!text.empty()) (*rank_codes)[q] = std::stoi(text);
  }
  return r;
}

// Under mpiexec -n 2: one line (rank 0's), and every rank exits with 2. Errors before MPI
// starts (CLI11's, --device) used to be printed by every rank, and reshard's always were.
TEST_F(ExitCodes, MultiRankCommandsUnderMpiexecPrintOnce) {
  std::vector<Case> cases = GatherCases(ckpt_, root_ + "/gathered.safetensors", root_ + "/missing");
  for (const Case& c : LoadCases(source_, missing_)) cases.push_back(c);
  for (const Case& c : ShardedLoadCases(ckpt_)) cases.push_back(c);
  for (const Case& c : ReshardCases(ckpt_, root_ + "/resharded")) cases.push_back(c);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    std::vector<int> codes;
    const CommandResult r = MpiPerRank(2, c.args, root_ + "/rc", &codes);
    ExpectBadArgument(r, c.part);
    EXPECT_EQ(codes, (std::vector<int>{2, 2})) << "exit code per rank";
  }
}

// Without a command, sdrt started by mpiexec prints its error once. The single-process
// commands (inspect, make, shard, demo) are a whole program in every process: each prints
// its own error, so that one run by a process that merely inherited a launcher's
// environment (PMI_RANK=1) never fails silently.
TEST_F(ExitCodes, OtherCommandsUnderMpiexec) {
  std::vector<int> codes;
  ExpectBadArgument(MpiPerRank(2, "--bogus", root_ + "/rc", &codes), "--bogus");
  EXPECT_EQ(codes, (std::vector<int>{2, 2})) << "exit code per rank";
  for (const Case& c :
       std::vector<Case>{{"inspect " + Q(missing_), missing_}, {"shard --mesh 2", "is required"}}) {
    SCOPED_TRACE(c.args);
    const CommandResult r = MpiPerRank(2, c.args, root_ + "/rc", &codes);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(codes, (std::vector<int>{2, 2})) << "exit code per rank";
    const std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), 2u) << r.err;  // one line per process
    for (const std::string& line : lines) EXPECT_THAT(line, HasSubstr(c.part));
  }
}
#endif

}  // namespace
}  // namespace sdrt
