// --timeout of the multi-rank commands (docs/SEMANTICS.md 11.16, docs/CLI.md "Exit codes"): a
// rank that stops (SIGSTOP) must not leave the others waiting. Each job here runs a
// stopped rank (tests/tools/stopped_rank.cc) beside the `sdrt` ranks, MPMD style; every
// live rank must print its error naming the op and the rank that did not arrive, and the
// job must end with exit status 1 within the timeout plus 5 s (plus MPI's start-up), with
// the stopped rank killed, not left behind.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using test::CommandResult;
using test::ShellQuote;

constexpr double kTimeoutSeconds = 2;
// MPI's start-up of three processes on a loaded 2-core machine, on top of the bound.
constexpr double kStartupSlackSeconds = 4;

class TimeoutCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(test::TestTmpRoot()) / absl::StrCat("timeout_cli_", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    checkpoint_ = (dir_ / "model.safetensors").string();
    sharded_ = (dir_ / "sharded").string();
    const CommandResult made =
        test::RunCommand(Sdrt() + " make " + ShellQuote(checkpoint_) + " --arch tiny-llama");
    ASSERT_EQ(made.exit_code, 0) << made.all();
    const CommandResult shard = test::RunCommand(Sdrt() + " shard " + ShellQuote(checkpoint_) +
                                                 " " + ShellQuote(sharded_) +
                                                 " --mesh 3 --plan fsdp");
    ASSERT_EQ(shard.exit_code, 0) << shard.all();
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string Sdrt() { return ShellQuote(SDRT_BINARY); }

  // `mpiexec` with one process per entry of `programs` (in rank order): "sdrt" runs
  // `sdrt ARGS`, "stopped" the stopped rank. Returns the result and the wall time.
  static CommandResult Job(const std::vector<std::string>& programs, const std::string& args,
                           double* seconds) {
    std::vector<std::string> parts;
    for (const std::string& p : programs) {
      parts.push_back(absl::StrCat(SDRT_MPIEXEC_NUMPROC_FLAG, " 1 ",
                                   p == "sdrt" ? Sdrt() + " " + args
                                               : ShellQuote(SDRT_STOPPED_RANK)));
    }
    const auto start = std::chrono::steady_clock::now();
    CommandResult result =
        test::RunCommand(ShellQuote(SDRT_MPIEXEC) + " " + absl::StrJoin(parts, " : "));
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

  // The lines of `err` that start with `prefix`.
  static std::vector<std::string> LinesStartingWith(const std::string& err,
                                                    const std::string& prefix) {
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(err, '\n')) {
      if (absl::StartsWith(line, prefix)) lines.emplace_back(line);
    }
    return lines;
  }

  fs::path dir_;
  std::string checkpoint_;
  std::string sharded_;
};

// `sdrt load` on three ranks, rank 1 stopped: ranks 0 and 2 each name rank 1.
TEST_F(TimeoutCli, LoadWithAStoppedRankEndsOnEveryLiveRank) {
  double seconds = 0;
  const CommandResult r = Job({"sdrt", "stopped", "sdrt"},
                              absl::StrCat("load ", ShellQuote(checkpoint_),
                                           " --mesh 3 --plan fsdp --timeout ", kTimeoutSeconds),
                              &seconds);
  EXPECT_EQ(r.exit_code, 1) << r.all();
  const std::vector<std::string> lines = LinesStartingWith(r.err, "sdrt load: ");
  ASSERT_EQ(lines.size(), 2u) << r.err;  // ranks 0 and 2, one line each
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr("(mpi, rank "));
    EXPECT_THAT(line, HasSubstr("rank 1 did not arrive"));
  }
  EXPECT_LT(seconds, kTimeoutSeconds + 5 + kStartupSlackSeconds) << r.err;
}

// `sdrt gather` on three ranks, rank 0 (the writer) stopped: ranks 1 and 2 name rank 0.
TEST_F(TimeoutCli, GatherWithTheFirstRankStoppedEndsOnEveryLiveRank) {
  const std::string out = (dir_ / "gathered.safetensors").string();
  double seconds = 0;
  const CommandResult r = Job({"stopped", "sdrt", "sdrt"},
                              absl::StrCat("gather ", ShellQuote(sharded_), " ", ShellQuote(out),
                                           " --timeout ", kTimeoutSeconds),
                              &seconds);
  EXPECT_EQ(r.exit_code, 1) << r.all();
  const std::vector<std::string> lines = LinesStartingWith(r.err, "sdrt gather: ");
  ASSERT_EQ(lines.size(), 2u) << r.err;
  for (const std::string& line : lines) {
    EXPECT_THAT(line, HasSubstr("rank 0 did not arrive"));
  }
  EXPECT_LT(seconds, kTimeoutSeconds + 5 + kStartupSlackSeconds) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// `sdrt bench` on two ranks, one stopped in the middle of its timed runs (by this test,
// 8 s in: after MPI's start, which --timeout does not cover, even on a loaded machine):
// wherever the live rank waits (an sdrt call, or the raw MPI of the flat baseline and of the
// timing), the job ends within the timeout plus 5 s of the stop. Before the raw MPI calls
// had a deadline it waited forever.
TEST_F(TimeoutCli, BenchWithARankStoppedMidRunEnds) {
  const std::string job =
      absl::StrCat("timeout 120 ", ShellQuote(SDRT_MPIEXEC), " ", SDRT_MPIEXEC_NUMPROC_FLAG, " 2 ",
                   Sdrt(), " bench --workload tiny --ops gather,broadcast --iters 99999 --timeout ",
                   kTimeoutSeconds);
  const std::string stop_one =
      "for d in /proc/[0-9]*; do "
      "if [ \"$(cat $d/comm 2>/dev/null)\" = sdrt ] && "
      "tr '\\0' ' ' <$d/cmdline 2>/dev/null | grep -q -- '--iters 99999'; then "
      "kill -STOP ${d#/proc/}; echo stopped >&2; break; fi; done";
  // The milliseconds from the stop to the job's end, on stdout.
  const CommandResult r = test::RunCommand(absl::StrCat(
      "(", job, " >/dev/null & job=$!; sleep 8; ", stop_one,
      "; t=$(date +%s%N); wait $job; rc=$?; echo $(( ($(date +%s%N) - t) / 1000000 )); "
      "exit $rc)"));
  ASSERT_THAT(r.err, HasSubstr("stopped")) << r.all();
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_EQ(LinesStartingWith(r.err, "sdrt bench: ").size(), 1u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("not complete after 2000 ms")) << r.err;
  EXPECT_LT(std::stod(r.out), (kTimeoutSeconds + 5) * 1000) << r.all();
}

TEST_F(TimeoutCli, TimeoutOutOfRangeIsABadArgument) {
  for (const std::string value : {"0", "-1", "abc", "1e9", "nan", "NaN", "inf"}) {
    const CommandResult r = test::RunCommand(Sdrt() + " load " + ShellQuote(checkpoint_) +
                                             " --mesh 1 --plan fsdp --timeout " + value);
    EXPECT_EQ(r.exit_code, 2) << value << ": " << r.all();
    EXPECT_THAT(r.err, HasSubstr("--timeout")) << value;
  }
}

}  // namespace
}  // namespace sdrt
