// core/io/atomic_file.h: the temporary paths of a killed process are swept by the next
// Create for the same target, and only those (the exact name form, a dead owner pid);
// RemoveTemporaryPaths removes what this process has not committed, even a folder another
// thread is still writing into.
#include "sdrt/core/io/atomic_file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"

namespace sdrt::internal {
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

// An interrupted command refuses new temporary names before it removes the ones it has,
// so that no thread of it makes one after the removal (an interrupted 4-rank gather left
// rank 0's temporary file behind in 2-3 of 10 runs). In a child process: the refusal lasts
// for the rest of the process.
TEST(AtomicFileDeathTest, NoTemporaryNameIsMadeOnceRefused) {
  const std::string dir = test::FreshDir("atomic_file_refused");
  EXPECT_EXIT(
      {
        RefuseNewTemporaryPaths();
        const absl::Status file = AtomicFile::Create(dir, "t.st").status();
        const absl::Status folder = AtomicFolder::Create(dir, "f").status();
        const bool refused = file.code() == absl::StatusCode::kCancelled &&
                             folder.code() == absl::StatusCode::kCancelled && fs::is_empty(dir) &&
                             RemoveTemporaryPaths() == 0;
        std::_Exit(refused ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(AtomicFile::Create(dir, "t.st").ok());  // this process still makes them
}

// An interrupted writer keeps creating files in its temporary folder while the signal
// watcher removes it: the removal is repeated until the folder is gone. With a single pass
// the folder was left behind, holding a file created meanwhile ("not empty"), within the
// first two of these rounds on a 2-core machine.
TEST(AtomicFolder, RemoveTemporaryPathsRemovesAFolderAnotherThreadWritesInto) {
  const std::string dir = test::FreshDir("atomic_folder_busy");
  for (int round = 0; round < 50; ++round) {
    absl::StatusOr<AtomicFolder> folder = AtomicFolder::Create(dir, "busy");
    ASSERT_TRUE(folder.ok()) << folder.status();
    std::atomic<bool> stop{false};
    std::atomic<int> created{0};
    std::thread writer([&] {
      for (int i = 0; !stop; ++i) {
        if (std::ofstream(absl::StrCat(folder->path(), "/f", i)) << "x") ++created;
      }
    });
    while (created < 20) std::this_thread::sleep_for(std::chrono::microseconds(20));
    EXPECT_EQ(RemoveTemporaryPaths(), 1);
    const std::vector<std::string> left = Names(dir);  // before the writer stops
    stop = true;
    writer.join();
    ASSERT_TRUE(left.empty()) << "round " << round << ": " << left.front();
  }
}

}  // namespace
}  // namespace sdrt::internal
