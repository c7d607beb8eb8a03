// The sync model of sync_cost.h on plans small enough to work out by hand: one message
// over NVLink or a NIC, a message cut into bucket-sized exchanges, two ranks swapping
// halves (each packing its next exchange while this one moves; on the CPU, dense boxes
// unpacked), two senders sharing one receiver's NIC, and the two baselines' formulas.
#include "sdrt/core/distributed/internal/engine/sync_cost.h"

#include <vector>

#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"

namespace sdrt {
namespace {

using internal::ClusterLinks;
using internal::TransferPlan;
using test::Describe;
using test::MeshLayout;

constexpr double kNic = 1e9, kNvlink = 10e9, kCopy = 20e9, kLatency = 1e-5;
constexpr int64_t kBytes = int64_t{1} << 20;  // float32 [1024, 256]

ClusterLinks Links(int64_t nodes, int64_t gpus) {
  ClusterLinks links;
  links.nodes = nodes;
  links.gpus_per_node = gpus;
  links.nic = kNic;
  links.nvlink = kNvlink;
  links.copy = kCopy;
  links.latency = kLatency;
  return links;
}

// A world of `world` ranks moving one float32 [1024, 256] tensor between the layouts.
TransferPlan Plan(int64_t world, internal::TransferLayout from, internal::TransferLayout to) {
  std::vector<internal::TransferTensor> tensors;
  tensors.push_back(Describe("w", DType::kFloat32, {1024, 256}, std::move(from), std::move(to)));
  internal::TransferPlanOptions options;
  options.world_size = world;
  absl::StatusOr<TransferPlan> plan = internal::PlanTransfer(std::move(tensors), options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

TransferPlan OneToTheNext() {
  return Plan(2, MeshLayout({1}, {0}, "[R]"), MeshLayout({1}, {1}, "[R]"));
}

TEST(SyncCostTest, OneMessageIsPackedSentAndUnpacked) {
  const double b = static_cast<double>(kBytes);
  absl::StatusOr<internal::SyncPrediction> nic =
      internal::PredictSync(OneToTheNext(), Links(2, 1), int64_t{256} << 20);
  ASSERT_TRUE(nic.ok()) << nic.status();
  EXPECT_NEAR(nic->seconds, b / kCopy + b / kNic + kLatency + b / kCopy, 1e-12);
  EXPECT_EQ(nic->max_nic_bytes, kBytes);
  EXPECT_EQ(nic->max_nvlink_bytes, 0);
  EXPECT_EQ(nic->messages, 1);
  EXPECT_EQ(nic->max_exchanges, 1);
  EXPECT_NEAR(nic->busiest_link_seconds, b / kNic, 1e-12);
  // The same two ranks on one node: NVLink.
  absl::StatusOr<internal::SyncPrediction> nvlink =
      internal::PredictSync(OneToTheNext(), Links(1, 2), int64_t{256} << 20);
  ASSERT_TRUE(nvlink.ok()) << nvlink.status();
  EXPECT_NEAR(nvlink->seconds, b / kCopy + b / kNvlink + kLatency + b / kCopy, 1e-12);
  EXPECT_EQ(nvlink->max_nvlink_bytes, kBytes);
  EXPECT_EQ(nvlink->max_nic_bytes, 0);
}

TEST(SyncCostTest, BucketsAreExchangesOneAfterAnother) {
  // A quarter of the tensor per bucket: four exchanges. The sender packs the next while one
  // moves, but the receiver unpacks each before it takes the next: every exchange costs a
  // copy, the wire and the latency, and the last unpacking comes after them.
  absl::StatusOr<internal::SyncPrediction> p =
      internal::PredictSync(OneToTheNext(), Links(2, 1), kBytes / 4);
  ASSERT_TRUE(p.ok()) << p.status();
  const double quarter = static_cast<double>(kBytes / 4);
  const double copy = quarter / kCopy;
  EXPECT_EQ(p->max_exchanges, 4);
  EXPECT_EQ(p->messages, 4);
  EXPECT_NEAR(p->seconds, 4 * (copy + quarter / kNic + kLatency) + copy, 1e-12);
}

TEST(SyncCostTest, SwappingRanksPackTheNextExchangeWhileThisOneMoves) {
  // Ranks 0 and 1 (one node each) swap the halves of four float32 [256, 256] tensors, a
  // tensor (an eighth of kBytes each way) per exchange. Each rank packs the first, then in
  // each exchange packs the next while the messages move (a copy, shorter than the wire)
  // and unpacks after them: 4 x (wire + latency + copy) after the first packing, where
  // packing after the wait would add a copy to each exchange.
  std::vector<internal::TransferTensor> tensors;
  for (const char* name : {"a", "b", "c", "d"}) {
    tensors.push_back(Describe(name, DType::kFloat32, {256, 256},
                               MeshLayout({2}, {0, 1}, "[S(0)]"),
                               MeshLayout({2}, {1, 0}, "[S(0)]")));
  }
  internal::TransferPlanOptions options;
  options.world_size = 2;
  absl::StatusOr<TransferPlan> made = internal::PlanTransfer(std::move(tensors), options);
  ASSERT_TRUE(made.ok()) << made.status();
  const TransferPlan& swap = *made;
  const double eighth = static_cast<double>(kBytes / 8);
  const double copy = eighth / kCopy, wire = eighth / kNic;
  absl::StatusOr<internal::SyncPrediction> p =
      internal::PredictSync(swap, Links(2, 1), kBytes / 8);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->max_exchanges, 4);
  EXPECT_EQ(p->messages, 8);
  EXPECT_NEAR(p->seconds, copy + 4 * (wire + kLatency + copy), 1e-12);
  // On the CPU the row ranges go from their locals into their locals: no copy at all.
  ClusterLinks host = Links(2, 1);
  host.host = true;
  absl::StatusOr<internal::SyncPrediction> direct = internal::PredictSync(swap, host, kBytes / 8);
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_NEAR(direct->seconds, 4 * (wire + kLatency), 1e-12);
}

TEST(SyncCostTest, TwoSendersShareTheReceiversNic) {
  // Ranks 0 and 1 hold a half each; rank 2, on a third node, needs all of it: its NIC
  // takes the halves one after the other.
  const TransferPlan plan = Plan(3, MeshLayout({2}, {0, 1}, "[S(0)]"), MeshLayout({1}, {2}, "[R]"));
  absl::StatusOr<internal::SyncPrediction> p =
      internal::PredictSync(plan, Links(3, 1), int64_t{256} << 20);
  ASSERT_TRUE(p.ok()) << p.status();
  const double half = static_cast<double>(kBytes / 2);
  EXPECT_NEAR(p->seconds, half / kCopy + 2 * half / kNic + kLatency + 2 * half / kCopy, 1e-12);
  EXPECT_EQ(p->max_nic_bytes, kBytes);
  EXPECT_NEAR(p->busiest_link_seconds, 2 * half / kNic, 1e-12);
  // Rank 2 on the node of rank 1: one half over NVLink, one over the NIC, at once.
  absl::StatusOr<internal::SyncPrediction> mixed =
      internal::PredictSync(Plan(3, MeshLayout({2}, {0, 2}, "[S(0)]"), MeshLayout({1}, {1}, "[R]")),
                            Links(2, 2), int64_t{256} << 20);
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  EXPECT_NEAR(mixed->seconds, half / kCopy + half / kNic + kLatency + 2 * half / kCopy, 1e-12);
}

TEST(SyncCostTest, BaselinesFollowTheirFormulas) {
  // Rank 1 (node 1) holds the tensor and needs it on another layout: the funnel takes it
  // into rank 0 over the NIC and broadcasts it back out; the bucketed broadcast stays on
  // node 1.
  const TransferPlan back = Plan(2, MeshLayout({1}, {1}, "[R]"), MeshLayout({1}, {1}, "[S(0)]"));
  const double b = static_cast<double>(kBytes);
  absl::StatusOr<internal::BaselinePredictions> p =
      internal::PredictBaselines(back, Links(2, 1), kBytes / 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->funnel_seconds, b / kNic + kLatency + b / kNic + kLatency, 1e-12);
  EXPECT_NEAR(p->bucketed_broadcast_seconds, b / kNvlink + 2 * kLatency + b / 2 / kCopy, 1e-12);
  // Rank 0 holds it and rank 1 (node 1) needs it: no gather; both broadcast over the NIC,
  // the bucketed one in two buckets.
  absl::StatusOr<internal::BaselinePredictions> out =
      internal::PredictBaselines(OneToTheNext(), Links(2, 1), kBytes / 2);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_NEAR(out->funnel_seconds, b / kNic + kLatency, 1e-12);
  EXPECT_NEAR(out->bucketed_broadcast_seconds, b / kNic + 2 * kLatency + b / 2 / kCopy, 1e-12);
  // Held on node 0 by rank 1: the funnel's gather is NVLink's.
  const TransferPlan local = Plan(2, MeshLayout({1}, {1}, "[R]"), MeshLayout({1}, {1}, "[S(0)]"));
  absl::StatusOr<internal::BaselinePredictions> q =
      internal::PredictBaselines(local, Links(1, 2), kBytes);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_NEAR(q->funnel_seconds, b / kNvlink + kLatency + b / kNvlink + kLatency, 1e-12);
  EXPECT_NEAR(q->bucketed_broadcast_seconds, b / kNvlink + kLatency + b / kCopy, 1e-12);
}

TEST(SyncCostTest, RefusesWhatItDoesNotModel) {
  TransferPlan plan = OneToTheNext();
  EXPECT_EQ(internal::PredictSync(plan, Links(1, 1), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);  // two ranks on one GPU
  ClusterLinks no_nic = Links(2, 1);
  no_nic.nic = 0;
  EXPECT_EQ(internal::PredictSync(plan, no_nic, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(internal::PredictBaselines(plan, no_nic, 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  plan.rank = 0;  // a plan of one rank lacks the others' messages
  EXPECT_EQ(internal::PredictSync(plan, Links(2, 1), 1 << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sdrt
