// Tests of the index arithmetic shared by the host paths and the CUDA kernels: plan
// simplification and access-width choice for specific layouts, and the linear->offset
// and unshard mappings on layouts whose offsets exceed 2^31 elements and bytes (only
// offsets are computed; nothing that large is allocated).
#include "sdrt/tensor/backend/index_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace sdrt::internal {
namespace {

using Int128 = __int128;

CopyPlan Build(int64_t elem_size, std::vector<int64_t> sizes, std::vector<int64_t> dst_strides,
               std::vector<int64_t> src_strides, uintptr_t dst_address = 0x10000,
               uintptr_t src_address = 0x20000, int* merged = nullptr) {
  CopyPlan plan;
  const int m =
      BuildCopyPlan(elem_size, static_cast<int>(sizes.size()), sizes.data(), dst_strides.data(),
                    src_strides.data(), dst_address, src_address, &plan);
  if (merged != nullptr) *merged = m;
  return plan;
}

std::vector<int64_t> Sizes(const CopyPlan& plan) {
  return std::vector<int64_t>(plan.sizes, plan.sizes + plan.ndim);
}
std::vector<int64_t> DstStrides(const CopyPlan& plan) {
  return std::vector<int64_t>(plan.dst_strides, plan.dst_strides + plan.ndim);
}
std::vector<int64_t> SrcStrides(const CopyPlan& plan) {
  return std::vector<int64_t>(plan.src_strides, plan.src_strides + plan.ndim);
}

TEST(WidestAccessWidthTest, PicksLargestPowerOfTwoDivisor) {
  EXPECT_EQ(WidestAccessWidth(0), 16);
  EXPECT_EQ(WidestAccessWidth(32), 16);
  EXPECT_EQ(WidestAccessWidth(24), 8);
  EXPECT_EQ(WidestAccessWidth(0x1004), 4);
  EXPECT_EQ(WidestAccessWidth(6), 2);
  EXPECT_EQ(WidestAccessWidth(7), 1);
}

TEST(BuildCopyPlanTest, ContiguousMergesToOneDimOfWidestAccesses) {
  // 33*17*2*4 = 4488 bytes: a multiple of 8 but not of 16.
  const CopyPlan plan = Build(4, {33, 17, 2, 1}, {34, 2, 1, 1}, {34, 2, 1, 7});
  EXPECT_EQ(plan.width, 8);
  EXPECT_EQ(plan.ndim, 1);
  EXPECT_EQ(plan.numel, 561);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{561}));
  EXPECT_EQ(DstStrides(plan), (std::vector<int64_t>{1}));
  EXPECT_EQ(SrcStrides(plan), (std::vector<int64_t>{1}));
}

TEST(BuildCopyPlanTest, SixteenByteAccessesForAlignedRuns) {
  const CopyPlan plan = Build(4, {64}, {1}, {1});
  EXPECT_EQ(plan.width, 16);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{16}));
}

TEST(BuildCopyPlanTest, TransposeKeepsElementWidth) {
  // dst contiguous [4, 6], src its transpose's view: strides {1, 4}.
  const CopyPlan plan = Build(2, {4, 6}, {6, 1}, {1, 4});
  EXPECT_EQ(plan.width, 2);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(DstStrides(plan), (std::vector<int64_t>{6, 1}));
  EXPECT_EQ(SrcStrides(plan), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(plan.numel, 24);
}

TEST(BuildCopyPlanTest, NarrowKeepsRowsAndWidensAccesses) {
  // Columns [2, 8) of a contiguous [8, 10] float tensor into a contiguous [8, 6].
  const CopyPlan plan = Build(4, {8, 6}, {6, 1}, {10, 1}, 0x10000, 0x20000 + 2 * 4);
  EXPECT_EQ(plan.width, 8);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(DstStrides(plan), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(SrcStrides(plan), (std::vector<int64_t>{5, 1}));
}

TEST(BuildCopyPlanTest, MisalignedAddressNarrowsAccesses) {
  const CopyPlan contiguous = Build(4, {10}, {1}, {1}, 0x10000, 0x20002);
  EXPECT_EQ(contiguous.width, 2);
  EXPECT_EQ(Sizes(contiguous), (std::vector<int64_t>{20}));

  // 8-byte elements at a 4-byte aligned address, transposed: each element becomes an
  // innermost dim of two 4-byte accesses.
  const CopyPlan transposed = Build(8, {3, 5}, {5, 1}, {1, 3}, 0x10000, 0x20004);
  EXPECT_EQ(transposed.width, 4);
  EXPECT_EQ(Sizes(transposed), (std::vector<int64_t>{3, 5, 2}));
  EXPECT_EQ(DstStrides(transposed), (std::vector<int64_t>{10, 2, 1}));
  EXPECT_EQ(SrcStrides(transposed), (std::vector<int64_t>{2, 6, 1}));
}

TEST(BuildCopyPlanTest, OddStridesForceByteAccesses) {
  // Bytes at stride 3: every access is one byte even though the addresses are aligned.
  const CopyPlan plan = Build(1, {5}, {1}, {3});
  EXPECT_EQ(plan.width, 1);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{5}));
  EXPECT_EQ(SrcStrides(plan), (std::vector<int64_t>{3}));
}

TEST(BuildCopyPlanTest, DropsSizeOneDimsWhateverTheirStrides) {
  const CopyPlan plan = Build(2, {1, 5, 1, 3}, {99, 3, 7, 1}, {1, 3, 1000, 1});
  EXPECT_EQ(plan.ndim, 1);
  EXPECT_EQ(plan.width, 2);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{15}));
}

TEST(BuildCopyPlanTest, BroadcastSourceStaysStrided) {
  // Rows of src repeated: src stride 0 along dim 0.
  const CopyPlan plan = Build(4, {5, 8}, {8, 1}, {0, 1});
  EXPECT_EQ(plan.width, 16);
  EXPECT_EQ(Sizes(plan), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(DstStrides(plan), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(SrcStrides(plan), (std::vector<int64_t>{0, 1}));
}

TEST(BuildCopyPlanTest, ScalarsAndEmptyCopies) {
  const CopyPlan scalar = Build(8, {}, {}, {});
  EXPECT_EQ(scalar.ndim, 0);
  EXPECT_EQ(scalar.width, 8);
  EXPECT_EQ(scalar.numel, 1);

  const CopyPlan byte = Build(1, {1, 1}, {1, 1}, {1, 1});
  EXPECT_EQ(byte.ndim, 0);
  EXPECT_EQ(byte.width, 1);
  EXPECT_EQ(byte.numel, 1);

  const CopyPlan empty = Build(4, {3, 0, 5}, {0, 5, 1}, {0, 5, 1});
  EXPECT_EQ(empty.numel, 0);
}

TEST(BuildCopyPlanTest, CountsDimsLeftAfterMerging) {
  // 13 dims of size 2: dst contiguous, src fully reversed, so no two dims merge.
  std::vector<int64_t> sizes(13, 2), dst_strides(13), src_strides(13);
  for (int d = 0; d < 13; ++d) {
    dst_strides[d] = int64_t{1} << (12 - d);
    src_strides[d] = int64_t{1} << d;
  }
  int merged = 0;
  Build(4, sizes, dst_strides, src_strides, 0x10000, 0x20000, &merged);
  EXPECT_EQ(merged, 13);

  // Twelve of them fit, and the plan gets all twelve dims plus none for the bytes.
  sizes.pop_back();
  dst_strides.pop_back();
  src_strides.pop_back();
  for (auto& s : dst_strides) s /= 2;
  const CopyPlan plan = Build(4, sizes, dst_strides, src_strides, 0x10000, 0x20000, &merged);
  EXPECT_EQ(merged, 12);
  EXPECT_EQ(plan.ndim, 12);
  EXPECT_EQ(plan.numel, 4096);
}

// Reference offsets of access `linear`, in 128-bit arithmetic.
void ReferenceOffsets(const CopyPlan& plan, Int128 linear, Int128* dst, Int128* src) {
  *dst = 0;
  *src = 0;
  for (int d = plan.ndim - 1; d >= 0; --d) {
    const Int128 i = linear % plan.sizes[d];
    linear /= plan.sizes[d];
    *dst += i * plan.dst_strides[d];
    *src += i * plan.src_strides[d];
  }
}

TEST(CopyPlanOffsetsTest, OffsetsBeyond2To31ElementsAndBytes) {
  // Narrow of a [3, 2^20 + 5, 2^12 + 3] tensor of 2-byte elements (offset 0): src
  // offsets reach ~2^33 elements, 2^34 bytes. Addresses are fake; nothing is read.
  const int64_t rows = int64_t{1} << 20, cols = int64_t{1} << 12;
  const int64_t src_row = cols + 3, src_plane = (rows + 5) * src_row;
  const CopyPlan plan = Build(2, {3, rows, cols}, {rows * cols, cols, 1}, {src_plane, src_row, 1});
  ASSERT_EQ(plan.ndim, 3);
  ASSERT_EQ(plan.width, 2);
  ASSERT_EQ(plan.numel, 3 * rows * cols);
  std::mt19937_64 gen(7);
  std::vector<int64_t> samples = {
      0, 1, cols - 1, cols, rows * cols - 1, rows * cols, plan.numel - 1};
  for (int k = 0; k < 1000; ++k) samples.push_back(static_cast<int64_t>(gen() % plan.numel));
  for (int64_t linear : samples) {
    Int128 dst = 0, src = 0;
    ReferenceOffsets(plan, linear, &dst, &src);
    const CopyOffsets offsets = CopyPlanOffsets<int64_t>(plan, linear);
    EXPECT_EQ(offsets.dst, static_cast<int64_t>(dst)) << "linear " << linear;
    EXPECT_EQ(offsets.src, static_cast<int64_t>(src)) << "linear " << linear;
  }
  const CopyOffsets last = CopyPlanOffsets<int64_t>(plan, plan.numel - 1);
  EXPECT_GT(last.src, int64_t{1} << 33);
  EXPECT_EQ(last.src, 2 * src_plane + (rows - 1) * src_row + cols - 1);
}

TEST(CopyPlanOffsetsTest, ThirtyTwoBitIndexGivesSixtyFourBitOffsets) {
  // Few accesses (the kernels' 32-bit index path) at huge strides, 16-byte accesses:
  // byte offsets near 2^46.
  CopyPlan plan;
  plan.ndim = 3;
  plan.width = 16;
  plan.sizes[0] = 3;
  plan.sizes[1] = 1000;
  plan.sizes[2] = 700;
  plan.dst_strides[0] = 700000;
  plan.dst_strides[1] = 700;
  plan.dst_strides[2] = 1;
  plan.src_strides[0] = (int64_t{1} << 41) + 7;
  plan.src_strides[1] = (int64_t{1} << 31) + 1;
  plan.src_strides[2] = 3;
  plan.numel = 3 * 1000 * 700;
  std::mt19937_64 gen(11);
  for (int k = 0; k < 2000; ++k) {
    const int64_t linear = k == 0 ? plan.numel - 1 : static_cast<int64_t>(gen() % plan.numel);
    Int128 dst = 0, src = 0;
    ReferenceOffsets(plan, linear, &dst, &src);
    const CopyOffsets wide = CopyPlanOffsets<int64_t>(plan, linear);
    const CopyOffsets narrow = CopyPlanOffsets<uint32_t>(plan, static_cast<uint32_t>(linear));
    EXPECT_EQ(wide.src, static_cast<int64_t>(src));
    EXPECT_EQ(wide.dst, static_cast<int64_t>(dst));
    EXPECT_EQ(narrow.src, wide.src);
    EXPECT_EQ(narrow.dst, wide.dst);
  }
  EXPECT_GT(CopyPlanOffsets<uint32_t>(plan, plan.numel - 1).src * plan.width, int64_t{1} << 45);
}

}  // namespace
}  // namespace sdrt::internal
