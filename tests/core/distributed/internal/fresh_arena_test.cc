// The arena of LoadStateDict's new locals (core/distributed/internal/fresh_arena.h): pieces
// that follow one another in a file follow one another in memory, every other piece starts
// on a 64-byte multiple of its own alignment, and the views share one storage. And the
// DTensors around them (internal/local_target.h, FreshDTensors): one allocation per call,
// which each result keeps alive.
#include "sdrt/core/distributed/internal/fresh_arena.h"

#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/local_target.h"

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

TEST(FreshDTensors, TheCallsDTensorsShareOneBlockThatTheLastResultKeeps) {
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}));
  const DTensor like =
      *DTensor::Make(*Tensor::Meta({2, 3}, DType::kFloat32), mesh, {Placement::Shard(0)}, {4, 3});
  std::vector<Value> values;
  {
    FreshDTensors made(3);
    for (int i = 0; i < 3; ++i) {
      Tensor local = *Tensor::Empty({2, 3}, DType::kFloat32, Device::CPU());
      static_cast<float*>(local.data_ptr())[0] = static_cast<float>(i + 1);
      values.push_back(made.Make(*like.WithLocal(std::move(local))));
    }
  }
  // Side by side in one allocation, each with its own local and the layout it was made of.
  EXPECT_EQ(&values[1].as_dtensor(), &values[0].as_dtensor() + 1);
  EXPECT_EQ(&values[2].as_dtensor(), &values[0].as_dtensor() + 2);
  const DTensor* last = &values[2].as_dtensor();
  values.erase(values.begin(), values.begin() + 2);
  // The block outlives the Values made before: the last one still reads its data.
  EXPECT_EQ(&values[0].as_dtensor(), last);
  EXPECT_EQ(static_cast<const float*>(values[0].as_dtensor().local().data_ptr())[0], 3.0f);
  EXPECT_THAT(values[0].as_dtensor().global_shape(), ElementsAre(4, 3));
  EXPECT_EQ(values[0].as_dtensor().placements(), like.placements());
  EXPECT_EQ(values[0].as_dtensor().mesh(), mesh);
}

TEST(FreshDTensors, PastItsRoomAFurtherBlockKeepsTheFirstInPlace) {
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
  const DTensor like =
      *DTensor::Make(*Tensor::Meta({2}, DType::kInt64), mesh, {Placement::Replicate()}, {2});
  const auto local = [] { return *Tensor::Empty({2}, DType::kInt64, Device::CPU()); };
  FreshDTensors made(2);
  std::vector<Value> values;
  std::vector<const DTensor*> at;
  for (int i = 0; i < 5; ++i) {
    values.push_back(made.Make(*like.WithLocal(local())));
    at.push_back(&values.back().as_dtensor());
  }
  // Two to a block: 0-1, 2-3, then 4; no DTensor ever moved.
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(&values[i].as_dtensor(), at[i]) << i;
  EXPECT_EQ(at[1], at[0] + 1);
  EXPECT_EQ(at[3], at[2] + 1);
}

TEST(FreshDTensors, RoomForNoneMakesEachAnAllocationOfItsOwn) {
  auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({1}));
  const DTensor like =
      *DTensor::Make(*Tensor::Meta({2}, DType::kInt64), mesh, {Placement::Replicate()}, {2});
  FreshDTensors made(0);
  Value first = made.Make(*like.WithLocal(*Tensor::Empty({2}, DType::kInt64, Device::CPU())));
  const Value second =
      made.Make(*like.WithLocal(*Tensor::Empty({2}, DType::kInt64, Device::CPU())));
  // Dropping the first releases its local: nothing else holds its storage.
  const std::weak_ptr<Storage> storage = first.as_dtensor().local().storage();
  first = Value();
  EXPECT_TRUE(storage.expired());
  EXPECT_EQ(second.as_dtensor().local().numel(), 2);
}

}  // namespace
}  // namespace sdrt::internal
