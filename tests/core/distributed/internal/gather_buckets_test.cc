// The gather plan's bucketing (core/distributed/internal/gather_plan.h, BucketItems), a pure
// function of every rank's padded bytes per item: consecutive items, every item in exactly
// one bucket, no bucket above the bound unless it holds one item larger than the bound alone.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/gather_plan.h"

namespace sdrt::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// An item whose rank q sends rank_bytes[q] bytes (already padded to 16).
GatherItem Item(std::vector<int64_t> rank_bytes) {
  GatherItem item;
  auto layout = std::make_shared<GatherLayout>();
  layout->rank_bytes = std::move(rank_bytes);
  item.layout = std::move(layout);
  return item;
}

// Every item in one bucket, in order; each bucket within `bound` unless it is one item.
void ExpectValidBuckets(const std::vector<GatherItem>& items, int64_t bound,
                        const std::vector<std::pair<size_t, size_t>>& buckets) {
  size_t next = 0;
  for (const auto& [begin, end] : buckets) {
    ASSERT_EQ(begin, next);
    ASSERT_LT(begin, end);
    const int64_t bytes = GatheredBytes(absl::MakeConstSpan(items).subspan(begin, end - begin));
    if (end - begin > 1) {
      EXPECT_LE(bytes, bound) << "bucket [" << begin << ", " << end << ")";
    }
    // Maximal: the next item would not have fit.
    if (end < items.size()) {
      EXPECT_GT(bytes + GatheredBytes(absl::MakeConstSpan(items).subspan(end, 1)), bound);
    }
    next = end;
  }
  EXPECT_EQ(next, items.size());
}

TEST(GatherBuckets, GroupsUpToTheBound) {
  // 2 ranks, 48 bytes per item; bound 100: two items per bucket (96), not three (144).
  std::vector<GatherItem> items(5, Item({32, 16}));
  const auto buckets = BucketItems(items, 100);
  EXPECT_THAT(buckets, ElementsAre(Pair(0, 2), Pair(2, 4), Pair(4, 5)));
  ExpectValidBuckets(items, 100, buckets);
}

TEST(GatherBuckets, ExactFitStaysInOneBucket) {
  std::vector<GatherItem> items(4, Item({16, 16, 16, 16}));  // 64 bytes each
  EXPECT_THAT(BucketItems(items, 128), ElementsAre(Pair(0, 2), Pair(2, 4)));
}

TEST(GatherBuckets, ATensorLargerThanTheBoundGoesAlone) {
  std::vector<GatherItem> items = {Item({16, 16}), Item({512, 512}), Item({16, 0}), Item({16, 16}),
                                   Item({1024, 0})};
  const auto buckets = BucketItems(items, 64);
  EXPECT_THAT(buckets, ElementsAre(Pair(0, 1), Pair(1, 2), Pair(2, 4), Pair(4, 5)));
  ExpectValidBuckets(items, 64, buckets);
}

TEST(GatherBuckets, ItemsThatSendNothingCostNothing) {
  std::vector<GatherItem> items = {Item({0, 0}), Item({64, 0}), Item({0, 0}), Item({0, 64})};
  EXPECT_THAT(BucketItems(items, 128), ElementsAre(Pair(0, 4)));
}

// Random items over 1 to 8 ranks and bounds from 16 bytes to 4 KiB.
TEST(GatherBuckets, RandomItemsRespectTheBound) {
  std::mt19937_64 rng(12);
  for (int trial = 0; trial < 500; ++trial) {
    const int ranks = 1 + static_cast<int>(rng() % 8);
    const int64_t bound = 16 * (1 + static_cast<int64_t>(rng() % 256));
    std::vector<GatherItem> items;
    const int count = static_cast<int>(rng() % 40);
    for (int i = 0; i < count; ++i) {
      std::vector<int64_t> bytes(static_cast<size_t>(ranks));
      for (int64_t& b : bytes) b = 16 * static_cast<int64_t>(rng() % (rng() % 4 == 0 ? 64 : 8));
      items.push_back(Item(std::move(bytes)));
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    ExpectValidBuckets(items, bound, BucketItems(items, bound));
  }
}

}  // namespace
}  // namespace sdrt::internal
