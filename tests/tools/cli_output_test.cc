// What the `sdrt` tool writes to the terminal: user strings (flags, paths, tensor names)
// with their control characters escaped (tools/sdrt/internal/output.h, Printable and
// ReportError), a failed `sdrt demo` child described in words with its exit class kept,
// and `--progress` lines under mpiexec.
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::ShellQuote;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(ShellQuote(SDRT_BINARY) + " " + args);
}

// No byte of `text` is a C0 control but the newline, DEL or a UTF-8 C1 control.
void ExpectNoControlCharacters(const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_FALSE((c < 0x20 && c != '\n') || c == 0x7f) << "byte " << int{c} << " at " << i;
    if (c == 0xc2 && i + 1 < text.size()) {
      EXPECT_GE(static_cast<unsigned char>(text[i + 1]), 0xa0) << "C1 control at " << i;
    }
  }
}

TEST(Printable, EscapesC0C1AndDelKeepsUtf8) {
  using cli::Printable;
  EXPECT_EQ(Printable("a\x1b[31mb"), "a\\x1b[31mb");
  EXPECT_EQ(Printable(std::string("n\0l\n\r\t\x7f", 7)), "n\\x00l\\x0a\\x0d\\x09\\x7f");
  EXPECT_EQ(Printable("csi\xc2\x9b"
                      "2J and \xc2\x85"),
            "csi\\u009b2J and \\u0085");
  // Bytes that are not UTF-8: a bare 8-bit CSI, a cut sequence, an overlong form, a surrogate.
  EXPECT_EQ(Printable("\x9b"
                      "2J"),
            "\\x9b2J");
  EXPECT_EQ(Printable("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  // UTF-8 text, NBSP (U+00A0, the first code point after C1) included, is unchanged.
  const std::string text = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xc2\xa0 plain\\x1b";
  EXPECT_EQ(Printable(text), text);
}

TEST(ControlCharacters, MeshDimNamesAreEscapedInErrorsAndOutput) {
  const std::string root = test::FreshDir("cli_output_dim_names");
  const std::string source = root + "/tiny.safetensors";
  ASSERT_EQ(Sdrt("make " + ShellQuote(source)).exit_code, 0);
  const std::string shard = "shard " + ShellQuote(source) + " ";

  // One name for two dims: the error echoes the names.
  CommandResult bad =
      Sdrt(shard + ShellQuote(root + "/bad") + " --mesh 2x2 --plan fsdp --mesh-dim-names " +
           ShellQuote("\x1b]0;owned\x07\x1b[31m"));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_THAT(bad.err, HasSubstr("\\x1b]0;owned\\x07\\x1b[31m"));
  ExpectNoControlCharacters(bad.all());

  // An empty name ("dp," was taken as dims "dp" and "") is refused.
  CommandResult empty = Sdrt(shard + ShellQuote(root + "/empty") +
                             " --mesh 2x2 --plan fsdp --mesh-dim-names dp,");
  EXPECT_EQ(empty.exit_code, 2) << empty.err;
  EXPECT_THAT(empty.err, HasSubstr("a dim's name is empty"));

  // Accepted names are printed escaped too, and so is an unknown flag (CLI11's message).
  CommandResult good =
      Sdrt(shard + ShellQuote(root + "/good") + " --mesh 2x2 --plan fsdp --mesh-dim-names " +
           ShellQuote("dp\x1b[2J,tp"));
  if (good.exit_code == 0) {
    EXPECT_THAT(good.out, HasSubstr("dp\\x1b[2J, tp"));
  } else {
    EXPECT_EQ(good.exit_code, 2);
    EXPECT_THAT(good.err, HasSubstr("dp\\x1b[2J"));
  }
  ExpectNoControlCharacters(good.all());
  CommandResult flag = Sdrt(shard + ShellQuote(root + "/o") + " --mesh 2 --plan fsdp " +
                            ShellQuote("--\x1b[31mred"));
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.err, HasSubstr("--\\x1b[31mred"));
  ExpectNoControlCharacters(flag.all());
}

// sdrt make's own checks echo --dtype and --seed; --arch goes through the library.
TEST(ControlCharacters, MakeEscapesItsFlagValues) {
  const std::string out = test::FreshDir("cli_output_make") + "/m.safetensors";
  for (const std::string flag : {"--dtype", "--seed", "--arch"}) {
    const CommandResult r = Sdrt("make " + ShellQuote(out) + " " + flag + " " +
                                 ShellQuote("x\x1b[31m"));
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("x\\x1b[31m")) << flag;
    ExpectNoControlCharacters(r.all());
  }
}

TEST(ControlCharacters, TensorNamesAndPathsAreEscapedInLibraryMessages) {
  const std::string root = test::FreshDir("cli_output_tensor_name");
  const std::string evil =
      "norm\x1b[2J\xc2\x9b"
      "1;1H.weight";
  const std::string source = root + "/evil\x1b[31m.safetensors";
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back(evil, *Tensor::Zeros({4}, DType::kFloat32));
  ASSERT_TRUE(WriteSafetensors(source, tensors, {}).ok());
  {
    std::ofstream plan(root + "/PLAN.json");
    plan << R"({"rules": [{"pattern": "norm", "placements": "[S(1)]"}]})";
  }
  // The plan's rule does not fit the 1-D tensor: the message names file, rule and tensor.
  CommandResult r = Sdrt("shard " + ShellQuote(source) + " " + ShellQuote(root + "/out") +
                         " --mesh 2 --plan " + ShellQuote(root + "/PLAN.json"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr("evil\\x1b[31m.safetensors"), HasSubstr("no dim 1"),
                           HasSubstr("norm\\x1b[2J")));
  ExpectNoControlCharacters(r.all());
  // inspect's table and summary.
  CommandResult listed = Sdrt("inspect " + ShellQuote(source));
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, AllOf(HasSubstr("norm\\x1b[2J\\u009b1;1H.weight"),
                                HasSubstr("evil\\x1b[31m.safetensors")));
  ExpectNoControlCharacters(listed.all());
}

// A fake mpiexec for `sdrt demo` (SDRT_MPIEXEC) that ends as `body` says.
std::string FakeMpiexec(const std::string& root, const std::string& body) {
  const std::string path = root + "/mpiexec";
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

TEST(Demo, AFailedChildIsDescribedAndKeepsItsExitClass) {
  const std::string root = test::FreshDir("cli_output_demo");
  const std::string demo = "demo --ranks 2 --cache-dir " + ShellQuote(root + "/cache");
  // A child that exits with 2 (bad input): the demo exits with 2.
  CommandResult two = test::RunCommand(
      "SDRT_MPIEXEC=" + ShellQuote(FakeMpiexec(root, "echo 'bad input' >&2; exit 2")) + " " +
      ShellQuote(SDRT_BINARY) + " " + demo);
  EXPECT_EQ(two.exit_code, 2) << two.err;
  EXPECT_THAT(two.err, AllOf(HasSubstr("gather"), HasSubstr("exited with code 2"),
                             Not(HasSubstr("status 512"))));
  // A child that exits with 1: 1.
  CommandResult one = test::RunCommand("SDRT_MPIEXEC=" + ShellQuote(FakeMpiexec(root, "exit 1")) +
                                       " " + ShellQuote(SDRT_BINARY) + " " + demo);
  EXPECT_EQ(one.exit_code, 1) << one.err;
  EXPECT_THAT(one.err, HasSubstr("exited with code 1"));
  // A child killed by a signal: a runtime failure (1), never a signal of the demo's own.
  CommandResult killed =
      test::RunCommand("SDRT_MPIEXEC=" + ShellQuote(FakeMpiexec(root, "kill -9 $$")) + " " +
                       ShellQuote(SDRT_BINARY) + " " + demo);
  EXPECT_EQ(killed.exit_code, 1) << killed.err;
  EXPECT_THAT(killed.err, HasSubstr("killed by signal 9 (SIGKILL)"));
  EXPECT_EQ(killed.err.find('\n'), killed.err.size() - 1) << killed.err;
}

// `make` printed the path it wrote raw ("wrote a<ESC>[31m..."), the one success line that
// did not go through Printable.
TEST(ControlCharacters, MakeEscapesThePathItWrote) {
  const std::string out = test::FreshDir("cli_output_make_path") + "/a\x1b[31mred\n.safetensors";
  const CommandResult r = Sdrt("make " + ShellQuote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("a\\x1b[31mred\\x0a.safetensors"));
  ExpectNoControlCharacters(r.all());
}

// The commands that are whole programs in every process (inspect, make, shard, demo) print
// their errors whatever rank a launcher's environment gives them; only gather and load
// (one job under mpiexec) print once, on rank 0. They printed nothing under PMI_RANK=1.
TEST(Errors, SingleProcessCommandsPrintTheirErrorsUnderAnyLauncherRank) {
  const std::string root = test::FreshDir("cli_output_launcher_rank");
  for (const std::string env : {"PMI_RANK=1", "MPI_LOCALRANKID=3"}) {
    SCOPED_TRACE(env);
    CommandResult r = test::RunCommand(env + " " + ShellQuote(SDRT_BINARY) + " inspect " +
                                       ShellQuote(root + "/missing.safetensors"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("missing.safetensors"));
    r = test::RunCommand(env + " " + ShellQuote(SDRT_BINARY) + " make " +
                         ShellQuote(root + "/no/such/folder/m.safetensors"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("does not exist"));
    r = test::RunCommand(env + " " + ShellQuote(SDRT_BINARY) + " inspect --no-such-flag x");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("--no-such-flag"));
  }
}

// An output path through a file ("afile/out.safetensors", or "afile/" as gather's folder)
// names the file that is in the way; it was lstat's bare "Not a directory".
TEST(Errors, AnOutputPathThroughAFileSaysWhichIsNotAFolder) {
  const std::string root = test::FreshDir("cli_output_through_file");
  ASSERT_EQ(Sdrt("make " + ShellQuote(root + "/afile")).exit_code, 0);
  for (const std::string out : {"/afile/m.safetensors", "/afile/sub/m.safetensors"}) {
    const CommandResult r = Sdrt("make " + ShellQuote(root + out));
    EXPECT_EQ(r.exit_code, 2) << out;
    EXPECT_THAT(r.err, HasSubstr("afile is not a folder")) << out;
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("Not a directory"))) << out;
  }
}

// Output that cannot be written (a full disk, a closed pipe) is a runtime failure, exit 1
// with one line on stderr; it was exit 0 with the output lost.
TEST(Errors, StdoutThatCannotBeWrittenIsExitOne) {
  const std::string source = test::FreshDir("cli_output_stdout") + "/tiny.safetensors";
  ASSERT_EQ(Sdrt("make " + ShellQuote(source)).exit_code, 0);
  const CommandResult r = Sdrt("inspect " + ShellQuote(source) + " > /dev/full");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("standard output could not be written"));
}

// --json of a path that is not UTF-8 died of nlohmann's type_error (SIGABRT) in gather, load
// and demo; every --json output now writes U+FFFD for the bad bytes.
TEST(Json, APathThatIsNotUtf8IsWrittenNotACrash) {
  const std::string root = test::FreshDir("cli_output_json_utf8");
  const std::string source = root + "/b\xff.safetensors";
  ASSERT_EQ(Sdrt("make " + ShellQuote(source)).exit_code, 0);
  const CommandResult r = Sdrt("load " + ShellQuote(source) + " --mesh 1 --plan fsdp --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("b\xef\xbf\xbd.safetensors"));  // U+FFFD
}

#if SDRT_CLI_HAVE_MPIEXEC
// `load --verify INDIR` with pieces that differ: every rank exits 2 (the two checkpoints
// disagree: bad input, as gather's hash check) and rank 0 says so on stderr; rank 1 exited
// 0 and rank 0 exit 1 with the verdict on stdout only.
TEST(Errors, VerifyMismatchIsBadInputOnEveryRank) {
  const std::string root = test::FreshDir("cli_output_verify");
  const std::string a = root + "/a.safetensors";
  const std::string b = root + "/b.safetensors";
  ASSERT_EQ(Sdrt("make " + ShellQuote(a) + " --seed 1").exit_code, 0);
  ASSERT_EQ(Sdrt("make " + ShellQuote(b) + " --seed 2").exit_code, 0);
  ASSERT_EQ(Sdrt("shard " + ShellQuote(a) + " " + ShellQuote(root + "/ck") +
                 " --mesh 2 --plan fsdp").exit_code, 0);
  // Each rank reports its own exit code on stderr.
  const std::string rank_wrapper = absl::StrCat(
      "sh -c '", SDRT_BINARY, " \"$@\" >/dev/null; c=$?; echo \"exit $c\" >&2; exit $c' sh");
  const CommandResult r = test::RunCommand(absl::StrCat(
      ShellQuote(SDRT_MPIEXEC), " -n 2 ", rank_wrapper, " load ", ShellQuote(b),
      " --mesh 2 --plan fsdp --verify ", ShellQuote(root + "/ck")));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  size_t twos = 0;
  for (size_t at = r.err.find("exit 2\n"); at != std::string::npos; at = r.err.find("exit 2\n", at + 1)) {
    ++twos;
  }
  EXPECT_EQ(twos, 2u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("on 2 rank(s) differ from"));
}

// How many of `err`'s progress lines for `what` are final ("what: N B of N B, ...").
size_t FinalProgressLines(const std::string& err, const std::string& what) {
  const std::string prefix = what + ": ";
  size_t finals = 0;
  for (size_t at = err.find(prefix); at != std::string::npos; at = err.find(prefix, at + 1)) {
    const size_t from = at + prefix.size();
    const size_t of = err.find(" of ", at);
    const size_t comma = err.find(", ", of);
    if (err.substr(from, of - from) == err.substr(of + 4, comma - of - 4)) ++finals;
  }
  return finals;
}

// Under mpiexec no rank's stderr is a terminal: progress shows only with --progress, on
// rank 0 alone (load, and reshard's exchanges).
TEST(Progress, ForcedProgressUnderMpiexecGoesToAFile) {
  const std::string root = test::FreshDir("cli_output_progress");
  const std::string source = root + "/tiny.safetensors";
  ASSERT_EQ(Sdrt("make " + ShellQuote(source)).exit_code, 0);
  const std::string mpiexec =
      absl::StrCat(ShellQuote(SDRT_MPIEXEC), " -n 2 ", ShellQuote(SDRT_BINARY));
  const std::string load =
      absl::StrCat(mpiexec, " load ", ShellQuote(source), " --mesh 2 --plan fsdp");
  CommandResult quiet = test::RunCommand(load);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_THAT(quiet.err, Not(HasSubstr("load, rank 0's bytes: ")));
  CommandResult shown = test::RunCommand(load + " --progress");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_THAT(shown.err, AllOf(HasSubstr("load, rank 0's bytes: "), HasSubstr(" of "),
                               HasSubstr("GB/s\n")));
  EXPECT_THAT(shown.err, Not(HasSubstr("\r")));
  EXPECT_EQ(FinalProgressLines(shown.err, "load, rank 0's bytes"), 1u) << shown.err;

  ASSERT_EQ(Sdrt(absl::StrCat("shard ", ShellQuote(source), " ", ShellQuote(root + "/fsdp"),
                              " --mesh 2 --plan fsdp"))
                .exit_code,
            0);
  const std::string reshard = absl::StrCat(mpiexec, " reshard ", ShellQuote(root + "/fsdp"), " ",
                                           ShellQuote(root + "/tp"), " --mesh 2 --plan tp");
  CommandResult resharded = test::RunCommand(reshard + " --bucket-mib 0.01 --progress");
  ASSERT_EQ(resharded.exit_code, 0) << resharded.err;
  EXPECT_THAT(resharded.err, AllOf(HasSubstr("reshard, rank 0's bytes: "), HasSubstr("GB/s\n")));
  EXPECT_EQ(FinalProgressLines(resharded.err, "reshard, rank 0's bytes"), 1u) << resharded.err;
}
#endif

}  // namespace
}  // namespace sdrt
