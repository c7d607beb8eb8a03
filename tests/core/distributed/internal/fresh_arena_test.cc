// The arena of LoadStateDict's new locals (core/distributed/internal/fresh_arena.h): pieces
// that follow one another in a file follow one another in memory, every other piece starts
// on a 64-byte multiple of its own alignment, and the views share one storage.
#include "sdrt/core/distributed/internal/fresh_arena.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FreshPiece InFile(int file, int64_t begin, int64_t bytes, int64_t alignment = 4) {
  return FreshPiece{bytes, alignment, file, begin, begin + bytes};
}

FreshPiece Scattered(int64_t bytes, int64_t alignment = 4) {
  return FreshPiece{bytes, alignment, -1, 0, 0};
}

TEST(LayOutFresh, PiecesThatFollowInTheFileFollowInMemory) {
  const absl::StatusOr<FreshLayout> layout =
      LayOutFresh({InFile(0, 100, 12), InFile(0, 112, 40), InFile(0, 152, 4)});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->offsets, ElementsAre(0, 12, 52));
  EXPECT_EQ(layout->bytes, 56);
}

TEST(LayOutFresh, AGapAnotherFileOrAScatteredPieceStartsAfreshOn64Bytes) {
  const absl::StatusOr<FreshLayout> layout = LayOutFresh({
      InFile(0, 0, 12),  // 0
      InFile(0, 20, 8),  // a gap of 8 bytes in the file: 64
      InFile(1, 28, 8),  // another file, though its offset follows: 128
      Scattered(100),    // 192
      InFile(1, 36, 8),  // follows file 1's piece, but not the piece before it: 320
      InFile(1, 44, 0),  // empty, follows: 328
      InFile(1, 44, 4),  // follows the empty piece: 328
  });
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->offsets, ElementsAre(0, 64, 128, 192, 320, 328, 328));
  EXPECT_EQ(layout->bytes, 332);
}

TEST(LayOutFresh, AStartThatBreaksTheAlignmentStartsAfresh) {
  // float32 x 3 then a float64 right after it in the file: byte 12 is no multiple of 8.
  // A 6-bit dtype's whole-element groups are 3 bytes: 64 is no multiple, 192 is.
  const absl::StatusOr<FreshLayout> layout =
      LayOutFresh({InFile(0, 0, 12, 4), InFile(0, 12, 16, 8), Scattered(3, 3)});
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_THAT(layout->offsets, ElementsAre(0, 64, 192));
}

TEST(LayOutFresh, RefusesBadPieces) {
  for (const FreshPiece& bad : {FreshPiece{-1, 4, -1, 0, 0}, FreshPiece{8, 0, -1, 0, 0},
                                FreshPiece{8, 17, -1, 0, 0}, FreshPiece{8, 4, 0, 0, 12}}) {
    const absl::StatusOr<FreshLayout> layout = LayOutFresh({InFile(0, 0, 4), bad});
    EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(layout.status().message(), HasSubstr("fresh piece 1"));
  }
  const absl::StatusOr<FreshLayout> huge =
      LayOutFresh({Scattered(int64_t{1} << 62), Scattered(int64_t{1} << 62)});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(AllocateFresh, ViewsOfOneStorageAtTheLayoutsOffsets) {
  std::vector<Tensor> tensors = {
      *Tensor::Meta({3}, DType::kFloat32), *Tensor::Meta({2, 5}, DType::kFloat32),
      *Tensor::Meta({0}, DType::kInt64), *Tensor::Meta({4}, DType::kFloat64)};
  const absl::StatusOr<FreshLayout> layout =
      LayOutFresh({InFile(0, 8, 12), InFile(0, 20, 40), InFile(0, 60, 0, 8), Scattered(32, 8)});
  ASSERT_TRUE(layout.ok()) << layout.status();
  std::vector<Tensor*> dests;
  for (Tensor& t : tensors) dests.push_back(&t);
  ASSERT_TRUE(AllocateFresh(*layout, Device::CPU(), dests).ok());
  const auto* base = static_cast<const char*>(tensors[0].storage()->data());
  for (size_t i = 0; i < tensors.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(tensors[i].device().is_cpu());
    EXPECT_TRUE(tensors[i].is_contiguous());
    EXPECT_EQ(tensors[i].storage(), tensors[0].storage());
    if (tensors[i].numel() > 0) {
      EXPECT_EQ(static_cast<const char*>(tensors[i].data_ptr()) - base, layout->offsets[i]);
    }
  }
  EXPECT_THAT(tensors[1].shape(), ElementsAre(2, 5));
  EXPECT_EQ(tensors[3].dtype(), DType::kFloat64);
  EXPECT_GE(tensors[0].storage()->nbytes(), layout->bytes);
  EXPECT_EQ(AllocateFresh(*layout, Device::CPU(), {dests[0]}).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace sdrt::internal
