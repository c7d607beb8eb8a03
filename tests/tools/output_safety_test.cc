// What the `sdrt` commands that write (shard, gather, make, demo) do to what is already on
// disk, run as the built binary: they replace only what they made, never write through a
// link into an input, and leave no temporary files when interrupted.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tools/command_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;
using test::CommandResult;
using test::ShellQuote;
using ::testing::AllOf;
using ::testing::HasSubstr;

CommandResult Sdrt(const std::string& args) {
  return test::RunCommand(ShellQuote(SDRT_BINARY) + " " + args);
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Every path under `root` (links not followed) with its bytes ("<dir>" for folders,
// "-> target" for links), sorted: equal before and after means nothing was touched.
std::vector<std::string> Snapshot(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    const std::string rel = fs::relative(e.path(), root).string();
    if (e.is_symlink()) {
      out.push_back(rel + " -> " + fs::read_symlink(e.path()).string());
    } else if (e.is_directory()) {
      out.push_back(rel + " <dir>");
    } else {
      out.push_back(rel + " " + ReadBytes(e.path().string()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A small full checkpoint and its sharded checkpoint (mesh 2, fsdp) under `root`.
void MakeCheckpoint(const std::string& root) {
  test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  const CommandResult r = Sdrt(absl::StrCat("shard ", ShellQuote(root + "/full.safetensors"), " ",
                                            ShellQuote(root + "/ckpt"), " --mesh 2 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
}

// --overwrite replaces only a folder that is exactly an sdrt sharded checkpoint.
TEST(ShardOverwrite, AFolderWithAnIndexJsonAndMoreIsNeverReplaced) {
  const std::string root = test::FreshDir("output_safety_overwrite");
  MakeCheckpoint(root);
  const std::string shard = absl::StrCat("shard ", ShellQuote(root + "/full.safetensors"), " ");

  // A web app's folder with an index.json of its own.
  const std::string app = root + "/app";
  fs::create_directories(app + "/sub");
  WriteBytes(app + "/index.json", "{\"name\": \"my-app\"}");
  WriteBytes(app + "/precious.txt", "precious");
  WriteBytes(app + "/sub/more.txt", "more");
  const std::vector<std::string> app_before = Snapshot(app);
  CommandResult r = Sdrt(shard + ShellQuote(app) + " --mesh 2 --plan fsdp --overwrite");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_THAT(r.err, AllOf(HasSubstr(app), HasSubstr("not a sharded checkpoint written by sdrt"),
                           HasSubstr("refusing to replace it")));
  EXPECT_EQ(Snapshot(app), app_before);

  // A real checkpoint with one more file, a subfolder, or a link in it.
  const std::string ckpt = root + "/ckpt";
  for (const std::string extra : {"notes.txt", "sub", "link"}) {
    SCOPED_TRACE(extra);
    if (extra == "sub") {
      fs::create_directories(ckpt + "/sub");
    } else if (extra == "link") {
      fs::create_symlink(root + "/full.safetensors", ckpt + "/link");
    } else {
      WriteBytes(ckpt + "/" + extra, "mine");
    }
    const std::vector<std::string> before = Snapshot(root);
    r = Sdrt(shard + ShellQuote(ckpt) + " --mesh 4 --plan fsdp --overwrite");
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_THAT(r.err, AllOf(HasSubstr("\"" + extra + "\""), HasSubstr("refusing to replace it")));
    EXPECT_EQ(Snapshot(root), before);
    fs::remove_all(ckpt + "/" + extra);
  }
  // Without the extra entry it is replaced.
  r = Sdrt(shard + ShellQuote(ckpt) + " --mesh 4 --plan fsdp --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadShardedCheckpointIndex(ckpt)->world_size, 4);
}

// An output that is a link, or resolves into an input, is refused and the input
// is left byte-identical, for every command that writes.
TEST(OutputPaths, LinksIntoInputsAreRefusedAndTheInputsUntouched) {
  const std::string root = test::FreshDir("output_safety_links");
  test::WriteSource(root + "/full.safetensors", test::MixedStateDict());
  const std::string ckpt = root + "/ckpt";
  CommandResult r = Sdrt(absl::StrCat("shard ", ShellQuote(root + "/full.safetensors"), " ",
                                      ShellQuote(ckpt), " --mesh 1 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string rank_file = ckpt + "/" + RankFileName(0, 1);
  fs::create_symlink(rank_file, root + "/out.safetensors");  // OUT -> a rank file
  fs::create_symlink(ckpt, root + "/alias");                 // a folder link into INDIR
  fs::create_symlink(ckpt, root + "/outdir");                // OUTDIR -> the checkpoint
  WriteBytes(root + "/notes.txt", "not a checkpoint");
  // A checkpoint whose rank file is a link to a file outside it (as in the Hugging Face
  // cache): OUT naming that file is the rank file, by identity, though no path says so.
  const std::string linked = root + "/linked";
  fs::create_directories(linked);
  fs::copy_file(ckpt + "/index.json", linked + "/index.json");
  fs::copy_file(rank_file, root + "/rank0.safetensors");
  fs::create_symlink("../rank0.safetensors", linked + "/" + RankFileName(0, 1));
  // A checkpoint whose rank file links into the folder a reshard would replace.
  const std::string into = root + "/into", held = root + "/held";
  fs::create_directories(into);
  fs::create_directories(held);
  fs::copy_file(ckpt + "/index.json", into + "/index.json");
  fs::copy_file(rank_file, held + "/rank0.safetensors");
  fs::create_symlink("../held/rank0.safetensors", into + "/" + RankFileName(0, 1));
  const std::vector<std::string> before = Snapshot(root);

  struct Case {
    std::string args;
    std::vector<std::string> words;
  };
  const std::string full = ShellQuote(root + "/full.safetensors");
  const std::vector<Case> cases = {
      {"gather " + ShellQuote(ckpt) + " " + ShellQuote(root + "/out.safetensors"),
       {"out.safetensors", "symbolic link"}},
      {"gather " + ShellQuote(ckpt) + " " + ShellQuote(root + "/alias/new.safetensors"),
       {"alias/new.safetensors", "is inside", ckpt}},
      {"gather " + ShellQuote(root + "/alias") + " " + ShellQuote(rank_file),
       {rank_file, "is inside"}},
      {"gather " + ShellQuote(linked) + " " + ShellQuote(root + "/rank0.safetensors"),
       {"rank0.safetensors is", RankFileName(0, 1), "the same file"}},
      {"make " + ShellQuote(root + "/out.safetensors"), {"out.safetensors", "symbolic link"}},
      // An existing safetensors file is replaced only with --overwrite.
      {"make " + full, {"full.safetensors exists", "--overwrite"}},
      {"gather " + ShellQuote(ckpt) + " " + full, {"full.safetensors exists", "--overwrite"}},
      // An existing file is replaced only when it is a safetensors file.
      {"make --overwrite " + ShellQuote(root + "/notes.txt"), {"notes.txt", "not a safetensors file"}},
      {"gather --overwrite " + ShellQuote(ckpt) + " " + ShellQuote(root + "/notes.txt"),
       {"notes.txt", "not a safetensors file", "refusing to replace it"}},
      {"shard " + full + " " + ShellQuote(root + "/outdir") + " --mesh 2 --plan fsdp --overwrite",
       {"outdir", "symbolic link"}},
      {"shard " + full + " " + ShellQuote(root) + " --mesh 2 --plan fsdp --overwrite",
       {"contains", "full.safetensors"}},
      // Replacing OUTDIR would replace the file an input rank file links to.
      {"reshard " + ShellQuote(into) + " " + ShellQuote(held) + " --mesh 1 --plan fsdp --overwrite",
       {"held", "rank0.safetensors", "links to"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    r = Sdrt(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    for (const std::string& w : c.words) EXPECT_THAT(r.err, HasSubstr(w));
    EXPECT_EQ(Snapshot(root), before);
  }
}

// A target name of 240 bytes is legal (NAME_MAX is 255), but its temporary name, which
// repeated it whole, was not: make, shard and gather failed with "File name too long".
TEST(OutputPaths, LongTargetNamesAreWritten) {
  const std::string root = test::FreshDir("output_safety_long_names");
  const std::string name = std::string(240 - 12, 'n') + ".safetensors";
  CommandResult r = Sdrt("make " + ShellQuote(root + "/" + name));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Sdrt(absl::StrCat("shard ", ShellQuote(root + "/" + name), " ",
                        ShellQuote(root + "/" + std::string(240, 'd')), " --mesh 1 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Sdrt(absl::StrCat("gather ", ShellQuote(root + "/" + std::string(240, 'd')), " ",
                        ShellQuote(root + "/" + std::string(240 - 12, 'g') + ".safetensors")));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// The names in `dir` that sdrt's temporary paths have (".<base>.tmp.<pid>.<hex>").
std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) out.push_back(name);
  }
  return out;
}

// Starts `sdrt <args>` (output discarded), sends `signo` as soon as a temporary path
// appears in `dir`, and returns the wait status; *saw_temp says whether one appeared
// before the command ended by itself.
int SignalWhenTemporaryAppears(const std::vector<std::string>& args, const std::string& dir,
                               int signo, bool* saw_temp) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    std::vector<char*> argv = {const_cast<char*>(SDRT_BINARY)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(SDRT_BINARY, argv.data());
    _exit(127);
  }
  *saw_temp = false;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (!Temporaries(dir).empty()) {
      *saw_temp = true;
      kill(pid, signo);
      waitpid(pid, &status, 0);
      break;
    }
    usleep(200);
  }
  return status;
}

// SIGTERM or SIGINT while shard or gather (into a file or a folder) writes removes the
// temporary paths and exits 1; after SIGKILL the next run writing the same target removes them.
// A command interrupted with nothing to remove (here simulate, which writes nothing) still
// says why it ends with exit 1, in one line.
TEST(Interrupted, NothingToRemoveIsStillSaid) {
  const CommandResult r = test::RunCommand(
      "timeout --preserve-status -s TERM 1 " + ShellQuote(SDRT_BINARY) +
      " simulate --model kimi-k2 --from megatron:tp=8,pp=8,ep=32 --to vllm:tp=16,dp=32"
      " --cluster nodes=64,gpus=8");
  EXPECT_EQ(r.exit_code, 1) << r.all();
  EXPECT_EQ(r.err, "sdrt: interrupted by Terminated; removed 0 temporary path(s)\n");
}

TEST(Interrupted, NoTemporaryPathOutlivesTheNextRun) {
  const std::string root = test::FreshDir("output_safety_interrupted");
  const std::string source = root + "/big.safetensors";
  // About 85 MB of float32: writing it takes long enough to be caught in the act.
  CommandResult r = Sdrt("make --arch tiny-llama --scale 6 --dtype f32 " + ShellQuote(source));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ckpt = root + "/ckpt";
  const std::vector<std::string> shard = {"shard", source, ckpt, "--mesh", "2", "--plan", "fsdp"};
  // SIGBUS is what reading a mapped input raises when another program truncates it: the
  // same way out (exit 1, temporaries removed), never death by the signal.
  for (const int signo : {SIGTERM, SIGINT, SIGBUS}) {
    SCOPED_TRACE(strsignal(signo));
    bool saw_temp = false;
    const int status = SignalWhenTemporaryAppears(shard, root, signo, &saw_temp);
    ASSERT_TRUE(saw_temp) << "shard ended before a temporary folder was seen";
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 1);
    EXPECT_THAT(Temporaries(root), ::testing::IsEmpty());
    EXPECT_FALSE(fs::exists(ckpt));
  }
  // SIGKILL leaves the folder; the next shard of the same target removes it.
  bool saw_temp = false;
  int status = SignalWhenTemporaryAppears(shard, root, SIGKILL, &saw_temp);
  ASSERT_TRUE(saw_temp);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(Temporaries(root).size(), 1u);
  r = Sdrt(
      absl::StrCat("shard ", ShellQuote(source), " ", ShellQuote(ckpt), " --mesh 2 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Temporaries(root), ::testing::IsEmpty());

  // gather (one rank, no mpiexec) of a one-rank checkpoint, interrupted while writing OUT.
  const std::string one = root + "/one";
  r = Sdrt(
      absl::StrCat("shard ", ShellQuote(source), " ", ShellQuote(one), " --mesh 1 --plan fsdp"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string out_dir = root + "/gathered";
  fs::create_directories(out_dir);
  const std::vector<std::string> gather = {"gather", one, out_dir + "/out.safetensors"};
  status = SignalWhenTemporaryAppears(gather, out_dir, SIGTERM, &saw_temp);
  ASSERT_TRUE(saw_temp) << "gather ended before a temporary file was seen";
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(Temporaries(out_dir), ::testing::IsEmpty());
  EXPECT_FALSE(fs::exists(out_dir + "/out.safetensors"));
  status = SignalWhenTemporaryAppears(gather, out_dir, SIGKILL, &saw_temp);
  ASSERT_TRUE(saw_temp);
  ASSERT_EQ(Temporaries(out_dir).size(), 1u);
  r = Sdrt(absl::StrCat("gather ", ShellQuote(one), " ", ShellQuote(out_dir + "/out.safetensors")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Temporaries(out_dir), ::testing::IsEmpty());

  // The same for gather into a Hugging Face folder: the temporary folder beside it goes.
  const std::vector<std::string> to_folder = {"gather", one, out_dir + "/hf/", "--max-shard-size",
                                              "10MB"};
  status = SignalWhenTemporaryAppears(to_folder, out_dir, SIGTERM, &saw_temp);
  ASSERT_TRUE(saw_temp) << "gather ended before a temporary folder was seen";
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(Temporaries(out_dir), ::testing::IsEmpty());
  EXPECT_FALSE(fs::exists(out_dir + "/hf"));
  status = SignalWhenTemporaryAppears(to_folder, out_dir, SIGKILL, &saw_temp);
  ASSERT_TRUE(saw_temp);
  ASSERT_EQ(Temporaries(out_dir).size(), 1u);
  r = Sdrt(absl::StrCat("gather ", ShellQuote(one), " ", ShellQuote(out_dir + "/hf/"),
                        " --max-shard-size 10MB"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Temporaries(out_dir), ::testing::IsEmpty());
  EXPECT_TRUE(fs::exists(out_dir + "/hf/model.safetensors.index.json"));
}

// Four demos at once on one empty cache, two with the built-in checkpoint and
// two with their own files, all succeed and leave only the built-in checkpoint behind.
TEST(Demo, FourConcurrentRunsOnOneCacheAllSucceed) {
  const std::string root = test::FreshDir("output_safety_demo");
  const std::string cache = root + "/cache";
  for (const char* name : {"a", "b"}) {
    test::WriteSource(absl::StrCat(root, "/", name, ".safetensors"), test::MixedStateDict());
  }
  const std::string sdrt =
      absl::StrCat("SDRT_MPIEXEC=", ShellQuote(SDRT_MPIEXEC), " ", ShellQuote(SDRT_BINARY),
                   " demo --ranks 1 --cache-dir ", ShellQuote(cache));
  const std::vector<std::string> extra = {"", "",
                                          " --checkpoint " + ShellQuote(root + "/a.safetensors"),
                                          " --checkpoint " + ShellQuote(root + "/b.safetensors")};
  std::string script;
  for (size_t i = 0; i < extra.size(); ++i) {
    const std::string log = ShellQuote(absl::StrCat(root, "/log", i));
    script += absl::StrCat("(", sdrt, extra[i], " >", log, " 2>&1; echo \"run ", i,
                           " exit $?\"; cat ", log, ") & ");
  }
  const CommandResult r = test::RunCommand(script + "wait");
  for (size_t i = 0; i < extra.size(); ++i) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("run ", i, " exit 0"))) << r.out;
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(cache)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"tiny-llama-x2.safetensors"});
}

}  // namespace
}  // namespace sdrt
