// The exchange order of schedule.h (OrderExchanges) and the schedules cut by it: tensors
// of different senders share an exchange group instead of one sender's tensors
// following each other, and on random layouts every rank's schedule still pairs each
// send with its receive and completes (run through the sync model of sync_cost.h, which
// fails on a message no exchange receives and on exchanges that wait on each other).
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/sync_cost.h"
#include "sdrt/tests/core/distributed/internal/engine/random.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"

namespace sdrt {
namespace {

using internal::TransferPlan;
using test::Describe;
using test::MeshLayout;
using ::testing::Each;
using ::testing::ElementsAre;

// 16 float32 [256, 256] tensors (256 KiB each): tensors 4k .. 4k + 3 on rank k (k < 4),
// every one of them needed in quarters by ranks 4 .. 7: an expert-parallel trainer's
// experts into a tensor-parallel engine.
TransferPlan ExpertsToQuarters() {
  std::vector<internal::TransferTensor> tensors;
  for (int64_t t = 0; t < 16; ++t) {
    tensors.push_back(Describe(absl::StrCat("experts.", t), DType::kFloat32, {256, 256},
                               MeshLayout({1}, {t / 4}, "[R]"),
                               MeshLayout({4}, {4, 5, 6, 7}, "[S(0)]")));
  }
  internal::TransferPlanOptions options;
  options.world_size = 8;
  absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(std::move(tensors), options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

TEST(ExchangeOrderTest, EachGroupTakesEverySendersNextTensor) {
  // A bucket of one tensor: each sender fits one tensor per group, each receiver four
  // quarters.
  const internal::ExchangeOrder order = internal::OrderExchanges(ExpertsToQuarters(), 256 << 10);
  EXPECT_THAT(order.tensors, ElementsAre(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  EXPECT_THAT(order.begin, ElementsAre(0, 4, 8, 12));
  // A bucket of two tensors: two per sender, two groups.
  const internal::ExchangeOrder two = internal::OrderExchanges(ExpertsToQuarters(), 512 << 10);
  EXPECT_THAT(two.tensors, ElementsAre(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
  EXPECT_THAT(two.begin, ElementsAre(0, 8));
  // A bucket of half a tensor: each tensor's sender would pass it, so each tensor is cut
  // by receiver into parts of at most half a bucket of its sender's bytes (four parts, one
  // receiver each); a group takes two parts of every sender, and each receiver two
  // quarters.
  const internal::ExchangeOrder half = internal::OrderExchanges(ExpertsToQuarters(), 128 << 10);
  EXPECT_THAT(half.part_counts, Each(4));
  EXPECT_THAT(half.begin, ElementsAre(0, 8, 16, 24, 32, 40, 48, 56));
  std::set<std::pair<size_t, uint32_t>> items;
  for (size_t g = 0; g < half.begin.size(); ++g) {
    std::set<size_t> senders;
    const size_t end = g + 1 < half.begin.size() ? half.begin[g + 1] : half.tensors.size();
    for (size_t k = half.begin[g]; k < end; ++k) {
      senders.insert(half.tensors[k] / 4);
      items.insert({half.tensors[k], half.parts[k]});
    }
    EXPECT_EQ(senders.size(), 4u) << "group " << g;
  }
  EXPECT_EQ(items.size(), 64u);
  const TransferPlan plan = ExpertsToQuarters();
  EXPECT_EQ(internal::PartOf(half, plan.tensors[0], 0, 5), 1u);
  EXPECT_EQ(internal::PartOf(half, plan.tensors[0], 0, 7), 3u);
  EXPECT_EQ(internal::PartOf(half, plan.tensors[0], 0, 0), 0u);  // not a receiver
}

TEST(ExchangeOrderTest, SendersMoveAtOnce) {
  // Four senders on four nodes, each sending its 1 MiB while the others send theirs: the
  // sync takes about 1 MiB / nic, not the 4 MiB / nic of one sender after another.
  // (No latency and copies next to free, so that the wire is all there is.)
  internal::ClusterLinks links;
  links.nodes = 8;
  links.gpus_per_node = 1;
  links.latency = 0;
  links.copy = 1e15;
  absl::StatusOr<internal::SyncPrediction> p =
      internal::PredictSync(ExpertsToQuarters(), links, 256 << 10);
  ASSERT_TRUE(p.ok()) << p.status();
  const double one_sender = static_cast<double>(1 << 20) / links.nic;
  EXPECT_NEAR(p->seconds, one_sender, 0.01 * one_sender);
  EXPECT_EQ(p->max_exchanges, 4);
}

TEST(ExchangeOrderTest, TwoRanksSwappingHalvesSendAtOnce) {
  // Ranks 0 and 1 swap the halves of one float32 [1024, 256] tensor (512 KiB each way) in
  // buckets of 128 KiB: the tensor is cut into one part per receiver, and a rank sends
  // nothing in the part it receives, so both parts share one group and every exchange
  // carries both directions: four exchanges of 128 KiB each way, not eight of one way.
  std::vector<internal::TransferTensor> tensors;
  tensors.push_back(Describe("w", DType::kFloat32, {1024, 256}, MeshLayout({2}, {0, 1}, "[S(0)]"),
                             MeshLayout({2}, {1, 0}, "[S(0)]")));
  internal::TransferPlanOptions options;
  options.world_size = 2;
  absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(std::move(tensors), options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const internal::ExchangeOrder order = internal::OrderExchanges(*plan, 128 << 10);
  EXPECT_THAT(order.part_counts, ElementsAre(2));
  EXPECT_THAT(order.parts, ElementsAre(0, 1));
  EXPECT_THAT(order.begin, ElementsAre(0));
  internal::ClusterLinks links;
  links.nodes = 2;
  links.gpus_per_node = 1;
  links.latency = 0;
  links.copy = 1e15;
  absl::StatusOr<internal::SyncPrediction> p = internal::PredictSync(*plan, links, 128 << 10);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_exchanges, 4);
  const double half = static_cast<double>(512 << 10) / links.nic;
  EXPECT_NEAR(p->seconds, half, 0.01 * half);
}

TEST(ExchangeOrderTest, RanksPastTheMeshLimitAreRefusedBeforeAnyArrayByRank) {
  // The order and the units keep arrays indexed by rank: a descriptor naming rank 2^40 (a
  // hostile peer's) is refused by the planner instead of sizing them.
  for (const bool boxes : {false, true}) {
    std::vector<internal::TransferTensor> tensors;
    internal::TransferLayout far = MeshLayout({1}, {int64_t{1} << 40}, "[R]");
    if (boxes) far = test::BoxLayout({{{0}, {4}, int64_t{1} << 40}});
    tensors.push_back(
        Describe("w", DType::kFloat32, {4}, std::move(far), MeshLayout({1}, {0}, "[R]")));
    absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(std::move(tensors));
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << boxes;
    EXPECT_THAT(plan.status().message(), ::testing::HasSubstr("outside [0, 1048576)")) << boxes;
  }
}

TEST(ExchangeOrderTest, RandomLayoutsScheduleIntoExchangesThatComplete) {
  for (uint64_t seed = 0; seed < 300; ++seed) {
    test::Random rng(seed);
    const int64_t world = rng.Uniform(2, 8);
    std::vector<internal::TransferTensor> tensors;
    const int64_t count = rng.Uniform(1, 12);
    for (int64_t t = 0; t < count; ++t) {
      const int ndim = static_cast<int>(rng.Uniform(1, 3));
      IntVector shape;
      for (int d = 0; d < ndim; ++d) shape.push_back(rng.Uniform(1, 40));
      const DType dtype = rng.Chance(50) ? DType::kFloat32 : DType::kBFloat16;
      tensors.push_back(Describe(absl::StrCat("t", t), dtype, shape,
                                 rng.Chance(20) ? test::RandomBoxes(rng, world, shape)
                                                : test::RandomMesh(rng, world, ndim),
                                 test::RandomMesh(rng, world, ndim)));
    }
    internal::TransferPlanOptions options;
    options.world_size = world;
    internal::ClusterLinks links;
    links.gpus_per_node = rng.Uniform(1, world);
    links.nodes = (world + links.gpus_per_node - 1) / links.gpus_per_node;
    if (rng.Chance(50)) {
      for (int64_t r = 0; r < world; ++r) options.node_of_rank.push_back(r / links.gpus_per_node);
    }
    absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(std::move(tensors), options);
    ASSERT_TRUE(plan.ok()) << "seed " << seed << ": " << plan.status();
    const int64_t bucket = int64_t{64} << rng.Uniform(0, 8);
    absl::StatusOr<internal::SyncPrediction> p = internal::PredictSync(*plan, links, bucket);
    ASSERT_TRUE(p.ok()) << "seed " << seed << ": " << p.status();
    EXPECT_GE(p->seconds, p->busiest_link_seconds) << "seed " << seed;
  }
}

}  // namespace
}  // namespace sdrt
