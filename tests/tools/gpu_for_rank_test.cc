// GpuForRank (tools/sdrt/internal/gpu_for_rank.h): the GPU a rank takes with --device cuda,
// from the devices it sees and its place among its node's ranks; RefuseSharedGpus: two ranks
// of a host on one GPU. No GPU needed.
#include "sdrt/tools/sdrt/internal/gpu_for_rank.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt::cli {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// One GPU per rank through CUDA_VISIBLE_DEVICES: 8 ranks on a node, each seeing one device.
TEST(GpuForRank, OneVisibleDeviceIsTakenWhateverTheRanksOnTheNode) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    const absl::StatusOr<int> gpu = GpuForRank(1, local_rank, 8);
    ASSERT_TRUE(gpu.ok()) << "local rank " << local_rank << ": " << gpu.status();
    EXPECT_EQ(*gpu, 0) << "local rank " << local_rank;
  }
  const absl::StatusOr<int> alone = GpuForRank(1, 0, 1);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(*alone, 0);
}

// Every rank sees the node's GPUs: each takes the one of its local rank.
TEST(GpuForRank, EnoughVisibleDevicesGiveEachRankItsLocalRank) {
  for (const int visible : {8, 16}) {
    for (int local_rank = 0; local_rank < 8; ++local_rank) {
      const absl::StatusOr<int> gpu = GpuForRank(visible, local_rank, 8);
      ASSERT_TRUE(gpu.ok()) << visible << " visible, local rank " << local_rank << ": "
                            << gpu.status();
      EXPECT_EQ(*gpu, local_rank) << visible << " visible";
    }
  }
  const absl::StatusOr<int> two_of_three = GpuForRank(3, 1, 2);
  ASSERT_TRUE(two_of_three.ok()) << two_of_three.status();
  EXPECT_EQ(*two_of_three, 1);
}

// More ranks than GPUs to go round: refused on every rank, naming both numbers.
TEST(GpuForRank, FewerDevicesThanRanksAreRefusedNamingBoth) {
  for (int local_rank = 0; local_rank < 8; ++local_rank) {
    const absl::StatusOr<int> gpu = GpuForRank(4, local_rank, 8);
    ASSERT_FALSE(gpu.ok()) << "local rank " << local_rank << " got GPU " << *gpu;
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(gpu.status().message(),
                AllOf(HasSubstr("8 ranks run on this node"), HasSubstr("sees only 4 CUDA"),
                      HasSubstr("at most 4 ranks per node"), HasSubstr("CUDA_VISIBLE_DEVICES")));
  }
  EXPECT_EQ(GpuForRank(2, 0, 3).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GpuForRank, NoVisibleDeviceIsRefused) {
  for (const int local_size : {1, 8}) {
    const absl::StatusOr<int> gpu = GpuForRank(0, 0, local_size);
    ASSERT_FALSE(gpu.ok()) << local_size << " ranks: got GPU " << *gpu;
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(gpu.status().message(), HasSubstr("no CUDA device is visible"));
  }
}

TEST(GpuForRank, BadInputsAreInvalidArguments) {
  struct Case {
    int visible, local_rank, local_size;
  };
  for (const Case& c : {Case{-1, 0, 1}, Case{1, -1, 8}, Case{1, 8, 8}, Case{8, 9, 8}, Case{1, 0, 0},
                        Case{1, 0, -2}}) {
    const std::string what =
        absl::StrCat(c.visible, " visible, local rank ", c.local_rank, " of ", c.local_size);
    const absl::StatusOr<int> gpu = GpuForRank(c.visible, c.local_rank, c.local_size);
    ASSERT_FALSE(gpu.ok()) << what << ": got GPU " << *gpu;
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(gpu.status().message(),
                HasSubstr(absl::StrCat("local rank ", c.local_rank, " of ", c.local_size)))
        << what;
  }
}

// Two ranks of a host given one GPU (the same PCI bus id), as when the launcher left every
// rank of a node the same one device: refused naming both ranks; the same bus id on other
// hosts is another GPU.
TEST(RefuseSharedGpus, TheSameGpuOnOneHostIsRefusedOnOthersNot) {
  EXPECT_TRUE(RefuseSharedGpus({}).ok());
  EXPECT_TRUE(RefuseSharedGpus({"a 0000:19:00.0", "a 0000:3b:00.0", "b 0000:19:00.0",
                                "b 0000:3b:00.0"})
                  .ok());
  const absl::Status shared =
      RefuseSharedGpus({"a 0000:19:00.0", "a 0000:3b:00.0", "b 0000:19:00.0", "a 0000:19:00.0"});
  EXPECT_EQ(shared.code(), absl::StatusCode::kInvalidArgument) << shared;
  EXPECT_THAT(shared.message(),
              AllOf(HasSubstr("ranks 0 and 3"), HasSubstr("a 0000:19:00.0"),
                    HasSubstr("CUDA_VISIBLE_DEVICES")));
}

}  // namespace
}  // namespace sdrt::cli
