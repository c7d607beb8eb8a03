// Tests of PlanPitchedCopies: the plan for the layouts LoadStateDict and CopyFrom hand it,
// and, for random row-major blocks, that running its copies with memcpy row by row gives
// what StridedCopyHost gives (the oracle), so the device path (cudaMemcpy2DAsync of each
// copy) moves the same bytes.
#include "sdrt/tensor/backend/pitched_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "sdrt/tensor/backend/strided_copy.h"

namespace sdrt::internal {
namespace {

std::vector<PitchedCopy> Plan(int64_t elem, std::vector<int64_t> sizes, std::vector<int64_t> dst,
                              std::vector<int64_t> src, bool* ok = nullptr,
                              int64_t max_copies = kMaxPitchedCopies) {
  std::vector<PitchedCopy> out;
  const bool planned = PlanPitchedCopies(elem, sizes, dst, src, max_copies, out);
  if (ok != nullptr) *ok = planned;
  return out;
}

// Row-major strides of `sizes` inside a tensor of `outer` sizes (same rank).
std::vector<int64_t> RowMajor(const std::vector<int64_t>& outer) {
  std::vector<int64_t> strides(outer.size(), 1);
  for (size_t k = outer.size(); k-- > 1;) strides[k - 1] = strides[k] * outer[k];
  return strides;
}

TEST(PitchedCopyTest, Shard1BlockOfAMatrixIsOneCopyOfItsRows) {
  // A bf16 [6, 10] tensor's columns [4, 7) read from staging (rows 10 apart) into a
  // contiguous [6, 3] local: 6 rows of 6 bytes.
  const std::vector<PitchedCopy> plan = Plan(2, {6, 3}, {3, 1}, {10, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].width, 6);
  EXPECT_EQ(plan[0].height, 6);
  EXPECT_EQ(plan[0].dst_pitch, 6);
  EXPECT_EQ(plan[0].src_pitch, 20);
  EXPECT_EQ(plan[0].dst_offset, 0);
  EXPECT_EQ(plan[0].src_offset, 0);
}

TEST(PitchedCopyTest, AOneColumnPieceIsOneCopyOfSingleElements) {
  // [5, 3] float over 3 ranks on dim 1: a [5, 1] piece, one element from each row.
  const std::vector<PitchedCopy> plan = Plan(4, {5, 1}, {1, 1}, {3, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].width, 4);
  EXPECT_EQ(plan[0].height, 5);
  EXPECT_EQ(plan[0].dst_pitch, 4);
  EXPECT_EQ(plan[0].src_pitch, 12);
  // A transpose is one copy per column of single elements.
  EXPECT_EQ(Plan(4, {3, 4}, {1, 3}, {4, 1}).size(), 3u);
}

TEST(PitchedCopyTest, ContiguousDimsMergeIntoOneRow) {
  const std::vector<PitchedCopy> plan = Plan(4, {2, 3, 5}, {15, 5, 1}, {15, 5, 1});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].width, 120);
  EXPECT_EQ(plan[0].height, 1);
}

TEST(PitchedCopyTest, ThreeDimBlockIsOneCopyPerOuterIndex) {
  // [2, 3, 4] block of a [2, 5, 8] float tensor: rows of 4 floats 8 apart, planes 40 apart.
  const std::vector<PitchedCopy> plan = Plan(4, {2, 3, 4}, {12, 4, 1}, {40, 8, 1});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[1].src_offset, 160);
  EXPECT_EQ(plan[1].dst_offset, 48);
  EXPECT_EQ(plan[1].height, 3);
}

TEST(PitchedCopyTest, RefusesWhatIsNotRows) {
  bool ok = true;
  Plan(4, {3, 4}, {4, 1}, {0, 1}, &ok);  // a broadcast source: rows overlap (pitch 0)
  EXPECT_FALSE(ok);
  Plan(1, {5, 2, 2}, {4, 2, 1}, {12, 4, 1}, &ok, /*max_copies=*/4);  // 5 copies > 4
  EXPECT_FALSE(ok);
  Plan(1, {2, 16}, {16, 1}, {int64_t{1} << 31, 1}, &ok);  // rows 2 GiB apart: past CUDA's pitch
  EXPECT_FALSE(ok);
  const std::vector<PitchedCopy> empty = Plan(4, {3, 0}, {0, 1}, {4, 1}, &ok);
  EXPECT_TRUE(ok);
  EXPECT_TRUE(empty.empty());
}

TEST(PitchedCopyTest, RandomBlocksMoveWhatTheStridedCopyMoves) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int ndim = 1 + static_cast<int>(rng() % 4);
    const int64_t elem = int64_t{1} << (rng() % 4);
    std::vector<int64_t> src_full(ndim), dst_full(ndim), sizes(ndim), src_at(ndim), dst_at(ndim);
    for (int k = 0; k < ndim; ++k) {
      sizes[k] = 1 + static_cast<int64_t>(rng() % 4);
      src_full[k] = sizes[k] + static_cast<int64_t>(rng() % 3);
      dst_full[k] = sizes[k] + static_cast<int64_t>(rng() % 2);
      src_at[k] = static_cast<int64_t>(rng() % (src_full[k] - sizes[k] + 1));
      dst_at[k] = static_cast<int64_t>(rng() % (dst_full[k] - sizes[k] + 1));
    }
    const std::vector<int64_t> src_strides = RowMajor(src_full);
    const std::vector<int64_t> dst_strides = RowMajor(dst_full);
    int64_t src_base = 0, dst_base = 0;
    for (int k = 0; k < ndim; ++k) {
      src_base += src_at[k] * src_strides[k];
      dst_base += dst_at[k] * dst_strides[k];
    }
    const int64_t src_bytes = src_strides[0] * src_full[0] * elem;
    const int64_t dst_bytes = dst_strides[0] * dst_full[0] * elem;
    std::vector<uint8_t> src(static_cast<size_t>(src_bytes));
    std::iota(src.begin(), src.end(), static_cast<uint8_t>(trial));
    std::vector<uint8_t> expected(static_cast<size_t>(dst_bytes), 0xEE);
    std::vector<uint8_t> got = expected;
    ASSERT_TRUE(StridedCopyHost(expected.data() + dst_base * elem, src.data() + src_base * elem,
                                elem, sizes, dst_strides, src_strides)
                    .ok());
    bool ok = false;
    const std::vector<PitchedCopy> plan = Plan(elem, sizes, dst_strides, src_strides, &ok);
    ASSERT_TRUE(ok) << "trial " << trial;  // row-major blocks always have rows
    for (const PitchedCopy& c : plan) {
      for (int64_t r = 0; r < c.height; ++r) {
        std::memcpy(got.data() + dst_base * elem + c.dst_offset + r * c.dst_pitch,
                    src.data() + src_base * elem + c.src_offset + r * c.src_pitch,
                    static_cast<size_t>(c.width));
      }
    }
    ASSERT_EQ(got, expected) << "trial " << trial;
  }
}

}  // namespace
}  // namespace sdrt::internal
