// core/io/atomic_file.h: the temporary paths of a killed process are swept by the next
// Create for the same target, and only those (the exact name form, a dead owner pid);
// RemoveTemporaryPaths removes what this process has not committed.
#include "sdrt/core/io/atomic_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"

namespace sdrt {
namespace {

namespace fs = std::filesystem;

// The pid of a child that has exited and been reaped: no live process has it (barring
// reuse in the moment).
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(AtomicFile, CreateSweepsOnlyDeadOwnersTemporariesOfTheSameTarget) {
  const std::string dir = test::FreshDir("atomic_file_sweep");
  const std::string dead = absl::StrCat(DeadPid());
  const std::string live = absl::StrCat(getppid());
  const std::vector<std::string> swept = {".t.st.tmp." + dead + ".0abc",
                                          ".t.st.tmp." + dead + ".d"};
  const std::vector<std::string> kept = {
      ".t.st.tmp." + live + ".abc",       // a live owner
      ".t.st.tmp." + dead + ".xyz",       // not hex
      ".t.st.tmp." + dead + ".abc.keep",  // more after the tag
      ".t.st.tmp." + dead + ".",          // no tag
      ".t.st.tmp.-" + dead + ".abc",      // not a pid
      ".other.tmp." + dead + ".abc",      // another target
      "t.st.tmp." + dead + ".abc",        // no leading dot
      ".t.st.old.tmp." + dead + ".abc",   // only AtomicFolder sweeps ".old"
  };
  for (const std::string& name : swept) std::ofstream(dir + "/" + name) << "x";
  fs::remove(dir + "/" + swept[1]);
  fs::create_directories(dir + "/" + swept[1] + "/inner");  // a folder, with contents
  for (const std::string& name : kept) std::ofstream(dir + "/" + name) << "x";

  absl::StatusOr<AtomicFile> file = AtomicFile::Create(dir, "t.st");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::string> want = kept;
  want.push_back(fs::path(file->path()).filename().string());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(Names(dir), want);

  // The live temporary file is this process's: RemoveTemporaryPaths removes it (and only it).
  EXPECT_EQ(RemoveTemporaryPaths(), 1);
  EXPECT_FALSE(fs::exists(file->path()));
  std::vector<std::string> rest = kept;
  std::sort(rest.begin(), rest.end());
  EXPECT_EQ(Names(dir), rest);
  EXPECT_EQ(RemoveTemporaryPaths(), 0);
}

TEST(AtomicFolder, CreateSweepsDeadOwnersFoldersAndCommittedPathsAreNotTemporary) {
  const std::string dir = test::FreshDir("atomic_folder_sweep");
  const std::string dead = absl::StrCat(DeadPid());
  fs::create_directories(dir + "/.ckpt.tmp." + dead + ".1f/sub");
  fs::create_directories(dir + "/.ckpt.old.tmp." + dead + ".2e/old");
  absl::StatusOr<AtomicFolder> folder = AtomicFolder::Create(dir, "ckpt");
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_EQ(Names(dir), std::vector<std::string>{fs::path(folder->path()).filename().string()});
  ASSERT_TRUE(folder->Install(dir, dir + "/ckpt", /*replace_existing=*/false).ok());
  EXPECT_EQ(RemoveTemporaryPaths(), 0);  // installed: no longer temporary
  EXPECT_EQ(Names(dir), std::vector<std::string>{"ckpt"});
}

}  // namespace
}  // namespace sdrt
