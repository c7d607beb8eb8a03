// Sharding sub-byte tensors (tensor/sharding/byte_cuts.h): which pieces cut a byte, and
// what the error says; DistributeTensor refuses them and moves the others bit-exact.
#include "sdrt/tensor/sharding/byte_cuts.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace sdrt::internal {
namespace {

using ::testing::HasSubstr;

constexpr DType kF4 = DType::kFloat4E2M1FNx2;
constexpr DType kF6 = DType::kFloat6E3M2FN;

ShardRuns RunsOf(IntSpan shape, const char* mesh, const char* placements, int64_t rank) {
  const DeviceMesh m = *DeviceMesh::FromString(mesh);
  return OwnedRuns(*ComputeLocalShapeAndGlobalOffset(shape, m, *ParsePlacements(placements), rank));
}

TEST(ByteCuts, FirstSubByteCutFindsTheDim) {
  const IntVector w = {4, 8};
  EXPECT_EQ(FirstSubByteCut(kF4, w, RunsOf(w, "2", "[S(0)]", 1)), -1);
  EXPECT_EQ(FirstSubByteCut(kF4, w, RunsOf(w, "2", "[S(1)]", 1)), -1);  // 4 elements: 2 bytes
  EXPECT_EQ(FirstSubByteCut(kF4, w, RunsOf(w, "3", "[S(1)]", 0)), 1);   // 3 elements
  EXPECT_EQ(FirstSubByteCut(kF4, w, RunsOf(w, "4", "[S(1)]", 1)), -1);  // 2 elements: 1 byte
  EXPECT_EQ(FirstSubByteCut(kF4, w, RunsOf(w, "8", "[S(1)]", 3)), 1);   // 1 element
  EXPECT_EQ(FirstSubByteCut(DType::kUInt8, w, RunsOf(w, "8", "[S(1)]", 3)), -1);
  // Rows of 3 elements (12 bits): pairs of rows are whole bytes, single rows are not.
  const IntVector odd = {4, 3};
  EXPECT_EQ(FirstSubByteCut(kF4, odd, RunsOf(odd, "2", "[S(0)]", 1)), -1);
  EXPECT_EQ(FirstSubByteCut(kF4, odd, RunsOf(odd, "4", "[S(0)]", 1)), 0);
  // 6-bit: 4 elements are 3 bytes.
  EXPECT_EQ(FirstSubByteCut(kF6, w, RunsOf(w, "2", "[S(1)]", 1)), -1);
  EXPECT_EQ(FirstSubByteCut(kF6, w, RunsOf(w, "4", "[S(1)]", 1)), 1);
  // _StridedShard: several runs on a dim, each must be whole bytes.
  const IntVector v = {16};
  EXPECT_EQ(FirstSubByteCut(kF4, v, RunsOf(v, "2", "[_S(0, 2)]", 1)), -1);
  EXPECT_EQ(FirstSubByteCut(kF4, v, RunsOf(v, "2", "[_S(0, 8)]", 1)), 0);
}

TEST(ByteCuts, TheErrorNamesTensorPlacementPiecesAndRule) {
  const DeviceMesh three = *DeviceMesh::FromString("3");
  absl::Status s = CheckShardingCutsWholeBytes("w", kF4, {4, 8}, three, *ParsePlacements("[S(1)]"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "tensor 'w' (float4_e2m1fn_x2 [4, 8]): Shard(1) over 3 ranks gives pieces of 3, 3, 2 "
            "elements along dim 1; a 4-bit element cannot be cut inside a byte");
  const DeviceMesh four = *DeviceMesh::FromString("4");
  s = CheckShardingCutsWholeBytes("", kF6, {4, 3}, four, *ParsePlacements("[S(0)]"));
  EXPECT_EQ(s.message(),
            "tensor (float6_e3m2fn [4, 3]): Shard(0) over 4 ranks gives pieces of 1, 1, 1, 1 "
            "along dim 0 (each index of dim 0 holds 3 elements); a 6-bit element cannot be cut "
            "inside a byte");
  const DeviceMesh two_by_two = *DeviceMesh::FromString("2x2");
  s = CheckShardingCutsWholeBytes("w", kF4, {4, 6}, two_by_two, *ParsePlacements("[S(0), S(1)]"));
  EXPECT_THAT(s.message(), HasSubstr("[S(0), S(1)] over mesh 2x2 gives pieces of 3, 3, 3, 3 "
                                     "elements along dim 1"));
  EXPECT_TRUE(
      CheckShardingCutsWholeBytes("w", kF4, {4, 8}, three, *ParsePlacements("[R]")).ok());
  EXPECT_TRUE(CheckShardingCutsWholeBytes("w", DType::kUInt8, {4, 8}, three,
                                          *ParsePlacements("[S(1)]"))
                  .ok());
  s = CheckBoxCutsWholeBytes("w", kF4, {4, 8}, {0, 3}, {4, 5});
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' (float4_e2m1fn_x2 [4, 8]): the shard at offsets "
                                     "[0, 3] with sizes [4, 5] is cut inside a byte on dim 1"));
  EXPECT_TRUE(CheckBoxCutsWholeBytes("w", kF4, {4, 8}, {2, 0}, {2, 8}).ok());
}

TEST(ByteCuts, DistributeTensorMovesWholeBytesAndRefusesCuts) {
  Tensor full = *Tensor::Empty({4, 8}, kF4);
  for (int k = 0; k < 16; ++k) full.data<uint8_t>()[k] = static_cast<uint8_t>(0x10 + k);
  auto two = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("2"));
  absl::StatusOr<DTensor> right = DistributeTensor(full, two, *ParsePlacements("[S(1)]"), 1);
  ASSERT_TRUE(right.ok()) << right.status();
  const Tensor& local = right->local();
  EXPECT_EQ(local.shape(), (IntVector{4, 4}));
  EXPECT_EQ(std::string(static_cast<const char*>(local.data_ptr()), 8),
            std::string("\x12\x13\x16\x17\x1a\x1b\x1e\x1f", 8));
  auto three = std::make_shared<const DeviceMesh>(*DeviceMesh::FromString("3"));
  absl::Status s = DistributeTensor(full, three, *ParsePlacements("[S(1)]"), 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Shard(1) over 3 ranks gives pieces of 3, 3, 2 elements"));
  EXPECT_TRUE(DistributeTensor(full, three, *ParsePlacements("[R]"), 2).ok());
}

}  // namespace
}  // namespace sdrt::internal
