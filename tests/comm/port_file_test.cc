// The port file of two jobs that meet (comm/internal/port_file.h): written atomically,
// read within bounds, never through a symlink, claimed once, removed only when it holds
// this process's port; one accepting job per port file.
#include "sdrt/comm/internal/port_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::internal {
namespace {

constexpr int kMax = 256;  // MPI_MAX_PORT_NAME under MPICH
constexpr char kPort[] = "tag#0$connentry#766D00020080EB0AD700FE[8]$";

class PortFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(test::TestTmpRoot(), "/port_file_test.", getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = dir_ + "/port";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  std::string dir_, path_;
};

TEST_F(PortFileTest, WritesReadsClaimsAndRemoves) {
  ASSERT_TRUE(WritePortFile(path_, kPort, kMax).ok());
  EXPECT_EQ(*ReadPortFile(path_, kMax), kPort);
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), {}), 1);  // no temp
  ASSERT_TRUE(Claim(path_).ok());
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*ReadPortFile(ClaimedPath(path_), kMax), kPort);
  EXPECT_EQ(Claim(path_).code(), absl::StatusCode::kNotFound);  // claimed once
  ASSERT_TRUE(WritePortFile(path_, kPort, kMax).ok());
  EXPECT_EQ(Claim(path_).code(), absl::StatusCode::kAlreadyExists);  // a claim is there
  ASSERT_TRUE(RemoveIfHolds(ClaimedPath(path_), kPort, kMax).ok());
  ASSERT_TRUE(RemoveIfHolds(path_, kPort, kMax).ok());
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_FALSE(std::filesystem::exists(ClaimedPath(path_)));
}

TEST_F(PortFileTest, RemovesOnlyItsOwnPort) {
  Write(path_, "someone-elses-port\n");
  ASSERT_TRUE(RemoveIfHolds(path_, kPort, kMax).ok());
  EXPECT_EQ(*ReadPortFile(path_, kMax), "someone-elses-port");
}

TEST_F(PortFileTest, ReplacesAStaleRegularFile) {
  Write(path_, "old-port\n");
  ASSERT_TRUE(WritePortFile(path_, kPort, kMax).ok());
  EXPECT_EQ(*ReadPortFile(path_, kMax), kPort);
}

TEST_F(PortFileTest, RefusesSymlinksAndOtherFiles) {
  Write(dir_ + "/target", std::string(kPort) + "\n");
  ASSERT_EQ(symlink((dir_ + "/target").c_str(), path_.c_str()), 0);
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WritePortFile(path_, kPort, kMax).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ReadPortFile(dir_ + "/target", kMax), kPort);  // the target is untouched
  const std::string folder = dir_ + "/folder";
  std::filesystem::create_directory(folder);
  EXPECT_EQ(ReadPortFile(folder, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckReplaceable(folder).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::filesystem::is_directory(folder));
}

// A second job accepting on the same path is refused while the first holds it; the lock
// goes with its holder, and a lock file the holder did not create stays.
TEST_F(PortFileTest, OneAcceptorAtATime) {
  const std::string lock_file = LockPath(path_);
  {
    absl::StatusOr<PortLock> first = PortLock::Take(path_);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_TRUE(std::filesystem::is_regular_file(lock_file));
    absl::StatusOr<PortLock> second = PortLock::Take(path_);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(second.status().message().find("another job is accepting on port file " + path_),
              std::string::npos)
        << second.status();
    PortLock moved = *std::move(first);  // the lock moves with it
    EXPECT_EQ(PortLock::Take(path_).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_FALSE(std::filesystem::exists(lock_file));  // created by the holder: removed
  Write(lock_file, "");  // left by a job that died: the kernel dropped its lock
  {
    absl::StatusOr<PortLock> again = PortLock::Take(path_);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(PortLock::Take(path_).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(std::filesystem::exists(lock_file));  // not this process's: left alone
  std::filesystem::remove(lock_file);
  ASSERT_EQ(symlink((dir_ + "/target").c_str(), lock_file.c_str()), 0);
  EXPECT_EQ(PortLock::Take(path_).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/target"));  // never created through the link
}

TEST_F(PortFileTest, RefusesWhatIsNotAPortName) {
  Write(path_, std::string(kMax + 1, 'a'));
  absl::StatusOr<std::string> big = ReadPortFile(path_, kMax);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("257 bytes (at most 256)"), std::string::npos);
  Write(path_, std::string(kMax, 'a'));  // no room for MPI's terminating NUL
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  Write(path_, "");
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  Write(path_, "port with spaces\n");
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  Write(path_, std::string("nul\0byte", 8));
  EXPECT_EQ(ReadPortFile(path_, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WritePortFile(path_, "bad port", kMax).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadPortFile(dir_ + "/none", kMax).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sdrt::internal
