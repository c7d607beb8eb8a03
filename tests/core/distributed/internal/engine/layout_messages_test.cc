// The planner's per-rank sums (core/distributed/internal/engine/layout_messages.h): a
// plan's totals add every layout's per-rank and per-node lists, dense below the largest
// small index seen so far and in a map beyond, and each index keeps one sum wherever it
// lives.
#include "sdrt/core/distributed/internal/engine/layout_messages.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace sdrt::test {
namespace {

using internal::PerRankBytes;
using Lists = std::vector<std::pair<int64_t, int64_t>>;

TEST(PerRankBytesTest, AnIndexTheArrayGrowsOverKeepsItsSum) {
  // Node 0 first seen beside a node id past the dense bound (the map holds both), then in a
  // list whose indices are all small (the array grows over node 0).
  PerRankBytes totals(0);
  ASSERT_TRUE(totals.AddTimes({{0, 100}, {int64_t{1} << 40, 10}}, 1));
  ASSERT_TRUE(totals.AddTimes({{0, 100}, {5, 10}}, 1));
  ASSERT_TRUE(totals.AddTimes({{-3, 7}, {0, 1}}, 2));
  EXPECT_EQ(totals.Max(), 202);
  Lists listed;
  totals.List(listed);
  EXPECT_EQ(listed, (Lists{{-3, 14}, {0, 202}, {5, 10}, {int64_t{1} << 40, 10}}));
}

TEST(PerRankBytesTest, TimesAndOverflow) {
  PerRankBytes totals(4);
  ASSERT_TRUE(totals.AddTimes({{1, 3}, {3, 5}}, 1000));
  EXPECT_EQ(totals.Max(), 5000);
  EXPECT_FALSE(totals.AddTimes({{3, int64_t{1} << 62}}, 4));
}

}  // namespace
}  // namespace sdrt::test
