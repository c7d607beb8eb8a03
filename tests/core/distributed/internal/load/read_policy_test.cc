// The read policy of LoadStateDict (core/distributed/internal/load/read_policy.h): what a rank
// says of its source (the same for the same files whatever their path, another for
// another modification time or header, why it cannot open it) and the read the ranks'
// descriptions give (auto's rule, the rank that differs named, a sharded folder's path).
#include "sdrt/core/distributed/internal/load/read_policy.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tests/core/checkpoint/sharded_checkpoint_test_util.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::internal {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

const std::string kFile = "safetensors file 0123456789abcdef";
const std::string kOther = "safetensors file 0123456789abcdee";
const std::string kSharded = "sdrt sharded folder";

ReadDecision Decide(ReadMode requested, const std::vector<std::string>& descriptions) {
  absl::StatusOr<ReadDecision> d = DecideRead(requested, descriptions);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : ReadDecision{};
}

TEST(DecideRead, AutoReadsWithEveryRankOnlyWhenEveryRankSeesRankZerosFiles) {
  ReadDecision d = Decide(ReadMode::kAuto, {kFile, kFile, kFile});
  EXPECT_EQ(d.read, ReadMode::kAll);
  EXPECT_FALSE(d.sharded);
  EXPECT_EQ(d.reason, "auto: every rank sees the same files");
  d = Decide(ReadMode::kAuto, {kFile, kFile, kOther, kOther});
  EXPECT_EQ(d.read, ReadMode::kRoot);
  EXPECT_EQ(d.reason,
            "auto: rank 2 sees other files than rank 0; rank 3 does not see rank 0's files either");
  d = Decide(ReadMode::kAuto, {kFile, kOther, kFile});
  EXPECT_EQ(d.reason, "auto: rank 1 sees other files than rank 0");
  std::vector<std::string> many(20, kOther);
  many[0] = kFile;
  d = Decide(ReadMode::kAuto, many);
  EXPECT_EQ(
      d.reason,
      "auto: rank 1 sees other files than rank 0; ranks 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
      "14, 15, 16, 17, ... do not see rank 0's files either");
  d = Decide(ReadMode::kAuto, {kFile, "cannot open it (x: No such file)"});
  EXPECT_EQ(d.read, ReadMode::kRoot);
  EXPECT_EQ(d.reason, "auto: rank 1 cannot open it (x: No such file)");
  d = Decide(ReadMode::kAuto, {"cannot open it (x)", kFile});
  EXPECT_EQ(d.read, ReadMode::kRoot);
  EXPECT_EQ(d.reason, "auto: rank 0 cannot open it (x)");
}

TEST(DecideRead, AllAndRootAreAsRequested) {
  ReadDecision d = Decide(ReadMode::kRoot, {"safetensors file", "cannot open it (x)"});
  EXPECT_EQ(d.read, ReadMode::kRoot);
  EXPECT_EQ(d.reason, "requested");
  d = Decide(ReadMode::kAll, {"safetensors file", "Hugging Face folder"});
  EXPECT_EQ(d.read, ReadMode::kAll);
  EXPECT_EQ(d.reason, "requested");
  const absl::Status mixed = DecideRead(ReadMode::kAll, {"safetensors file", kSharded}).status();
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.message(), HasSubstr("rank 1's source is an sdrt sharded folder but rank 0's "
                                         "is a safetensors file"));
}

TEST(DecideRead, ASharedFolderIsReadFromItsRankFiles) {
  for (const ReadMode read : {ReadMode::kAuto, ReadMode::kAll}) {
    const ReadDecision d = Decide(read, {kSharded, kSharded, "cannot open it (x)"});
    EXPECT_EQ(d.read, ReadMode::kAll);
    EXPECT_TRUE(d.sharded);
    EXPECT_EQ(d.reason, "an sdrt sharded folder: rank files, resharded");
  }
  const absl::Status root = DecideRead(ReadMode::kRoot, {kSharded}).status();
  EXPECT_EQ(root.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(root.message(), HasSubstr("sharded folder: every rank reads its own rank files"));
  const absl::Status mixed =
      DecideRead(ReadMode::kAuto, {kSharded, "Hugging Face folder 0123456789abcdef"}).status();
  EXPECT_EQ(mixed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mixed.message(), HasSubstr("rank 1's source is a Hugging Face folder but rank 0's "
                                         "is an sdrt sharded folder"));
}

class DescribeSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::FreshDir("read_policy_describe");
    tensors_ = {{"w", test::ValuePattern({4, 3}, DType::kFloat32, 1)}};
  }
  // Writes `path` with the given metadata and a fixed modification time (+ `later` s).
  void Write(const std::string& path, const std::string& format, int later = 0) {
    ASSERT_TRUE(WriteSafetensors(path, tensors_, {{"format", format}}).ok());
    const timespec when[2] = {{1700000000 + later, 0}, {1700000000 + later, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), when, 0), 0);
  }
  std::string Describe(const std::string& path, bool fingerprint = true) {
    absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(path);
    EXPECT_TRUE(source.ok()) << source.status();
    return source.ok() ? DescribeSource(&*source, absl::OkStatus(), fingerprint) : "";
  }
  std::string dir_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

TEST_F(DescribeSourceTest, TheSameFilesAloneDescribeAlike) {
  const std::string a = dir_ + "/a.safetensors";
  const std::string b = dir_ + "/b.safetensors";
  Write(a, "pt");
  Write(b, "pt");
  EXPECT_THAT(Describe(a), MatchesRegex("safetensors file [0-9a-f]{16}"));
  EXPECT_EQ(Describe(a, /*fingerprint=*/false), "safetensors file");
  EXPECT_EQ(Describe(a), Describe(b));  // the path is not what a rank sees
  const std::string same = Describe(a);
  Write(b, "pt", /*later=*/1);  // another modification time
  EXPECT_NE(Describe(b), same);
  Write(b, "np");  // another header, the same size and time
  EXPECT_NE(Describe(b), same);
  EXPECT_EQ(DescribeSource(nullptr, absl::NotFoundError("x: gone"), true),
            "cannot open it (x: gone)");
  const std::string sharded = dir_ + "/sharded";
  ASSERT_TRUE(
      WriteShardedCheckpoint(*CheckpointSource::Open(a),
                             std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2")),
                             *ShardingPlan::Builtin("fsdp"), sharded)
          .ok());
  EXPECT_EQ(Describe(sharded), "sdrt sharded folder");
}

// LoadOptions::readers 0: one reader into CPU locals whatever the cores, half the CPUs into
// device locals between 1 and 4; a count the caller gives is kept.
TEST(ResolveReaders, ZeroChoosesByTheLocalsDeviceAndTheCpus) {
  for (const int cpus : {1, 2, 16, 128}) EXPECT_EQ(ResolveReaders(0, false, cpus), 1) << cpus;
  EXPECT_EQ(ResolveReaders(0, true, 1), 1);
  EXPECT_EQ(ResolveReaders(0, true, 2), 1);
  EXPECT_EQ(ResolveReaders(0, true, 6), 3);
  EXPECT_EQ(ResolveReaders(0, true, 16), kMaxAutomaticReaders);
  EXPECT_EQ(ResolveReaders(0, true, 128), kMaxAutomaticReaders);
  EXPECT_EQ(ResolveReaders(3, false, 1), 3);
  EXPECT_EQ(ResolveReaders(7, true, 128), 7);
  const int cpus = AffinityCpus();
  EXPECT_GE(cpus, 1);
  EXPECT_LE(cpus, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace sdrt::internal
