// RouteTransfer (core/distributed/internal/engine/route_cache.h): an equal request gets
// the route made before; anything a route depends on (a name, a dtype, a shape, a layout,
// a mesh's ranks, the rank, the bucket size) makes a new one; the least recently used
// route goes first once kMaxCachedRoutes are kept; errors are not kept; a key holding
// another key's digest follows its words, and DistributeStateDict, which keys its route
// that way, gets its own layout's route every call.
#include "sdrt/core/distributed/internal/engine/route_cache.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::RouteCacheCounts;
using internal::RouteCacheCountsNow;
using internal::RouteTransfer;
using internal::TransferPlanOptions;
using internal::TransferRoute;
using internal::TransferScheduleOptions;
using internal::TransferTensor;

TransferTensor Weight(std::string name = "w", IntVector shape = {12, 8},
                      std::vector<int64_t> destination_ranks = {}) {
  return Describe(std::move(name), DType::kFloat32, std::move(shape), MeshLayout({4}, {}, "[S(0)]"),
                  MeshLayout({2}, std::move(destination_ranks), "[S(1)]"));
}

// The route of `tensors` for rank 1, counting whether the cache answered.
struct Answer {
  std::shared_ptr<const TransferRoute> route;
  bool hit = false;
};
Answer Route(std::vector<TransferTensor> tensors, int64_t rank = 1,
             int64_t bucket_bytes = int64_t{1} << 20) {
  TransferPlanOptions plan_options;
  plan_options.rank = rank;
  TransferScheduleOptions schedule_options;
  schedule_options.bucket_bytes = bucket_bytes;
  const RouteCacheCounts before = RouteCacheCountsNow();
  absl::StatusOr<std::shared_ptr<const TransferRoute>> route =
      RouteTransfer(internal::DescribedTransfer(tensors), plan_options, schedule_options);
  EXPECT_TRUE(route.ok()) << route.status();
  const RouteCacheCounts after = RouteCacheCountsNow();
  EXPECT_EQ(after.hits + after.misses, before.hits + before.misses + 1);
  return {route.ok() ? *route : nullptr, after.hits == before.hits + 1};
}

TEST(RouteCacheTest, AnEqualRequestGetsTheRouteMadeBefore) {
  const Answer first = Route({Weight("equal.a"), Weight("equal.b", {6, 4})});
  // Equal descriptors built anew (other mesh objects of the same content).
  const Answer second = Route({Weight("equal.a"), Weight("equal.b", {6, 4})});
  ASSERT_NE(first.route, nullptr);
  EXPECT_TRUE(second.hit);
  EXPECT_EQ(second.route, first.route);
  // The route is the plan and schedule of a fresh PlanTransfer.
  TransferPlanOptions plan_options;
  plan_options.rank = 1;
  absl::StatusOr<internal::TransferPlan> fresh =
      internal::PlanTransfer({Weight("equal.a"), Weight("equal.b", {6, 4})}, plan_options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(first.route->plan.stats.wire_bytes, fresh->stats.wire_bytes);
  EXPECT_EQ(first.route->plan.stats.messages, fresh->stats.messages);
  ASSERT_EQ(first.route->plan.tensors.size(), 2u);
  EXPECT_EQ(first.route->plan.tensors[1].name, "equal.b");
}

TEST(RouteCacheTest, WhatARouteDependsOnMakesANewOne) {
  const Answer base = Route({Weight("dep")});
  EXPECT_FALSE(Route({Weight("dep2")}).hit);                      // a name
  EXPECT_FALSE(Route({Weight("dep", {12, 4})}).hit);              // a shape
  EXPECT_FALSE(Route({Weight("dep", {12, 8}, {4, 5})}).hit);      // a mesh's ranks
  EXPECT_FALSE(Route({Weight("dep")}, /*rank=*/2).hit);           // the rank
  EXPECT_FALSE(Route({Weight("dep")}, 1, int64_t{1} << 10).hit);  // the bucket size
  TransferTensor half = Weight("dep");
  half.dtype = DType::kFloat16;
  EXPECT_FALSE(Route({half}).hit);  // a dtype
  TransferTensor replicated = Weight("dep");
  replicated.destination = MeshLayout({2}, {}, "[R]");
  EXPECT_FALSE(Route({replicated}).hit);  // a placement
  // Two tensors in the other order are another request.
  const Answer ab = Route({Weight("order.a"), Weight("order.b")});
  EXPECT_FALSE(Route({Weight("order.b"), Weight("order.a")}).hit);
  EXPECT_TRUE(Route({Weight("order.a"), Weight("order.b")}).hit);
  EXPECT_NE(base.route, ab.route);
}

// A request that writes its words into a key of its own (DistributeStateDict and
// BroadcastStateDict, in the walk they make anyway) puts that key's digest into the route's
// key: equal words give equal keys, a word or a name more or different gives another.
TEST(RouteCacheTest, AKeyHoldingAnotherKeysDigestFollowsItsWords) {
  const auto outer = [](const std::vector<int64_t>& words, const std::string& name) {
    internal::RouteKey inner(1);
    for (int64_t w : words) inner.Word(w);
    inner.Name(name);
    internal::RouteKey key(1);
    key.Word(7);
    key.AppendDigestOf(inner);
    return key.Digest();
  };
  EXPECT_EQ(outer({1, 2}, "a.b"), outer({1, 2}, "a.b"));
  EXPECT_NE(outer({1, 2}, "a.b"), outer({1, 3}, "a.b"));
  EXPECT_NE(outer({1, 2}, "a.b"), outer({1, 2}, "a.c"));
  EXPECT_NE(outer({1, 2}, "a.b"), outer({1, 2, 0}, "a.b"));
}

// DistributeStateDict keys its route with the words it writes while it walks the leaves:
// the same call again is answered from the cache, and the same names cut another way (or
// on another rank) are not, so every call gets its own layout's pieces.
TEST(RouteCacheTest, DistributeGetsItsLayoutsRouteEveryCall) {
  const auto mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create({2}));
  Map full;
  full.Set("layer.w", Value(Arange({6, 4}, DType::kFloat32)));
  full.Set("layer.b", Value(Arange({6}, DType::kFloat32, 100)));
  const auto call = [&](const char* placements, int rank) {
    Map local;
    const std::vector<Placement> p = *ParsePlacements(placements);
    for (const char* name : {"layer.w", "layer.b"}) {
      const Tensor& t = full.Find(name)->as_tensor();
      const bool matrix = t.dim() == 2;
      const std::vector<Placement> mine = matrix ? p : std::vector<Placement>{Placement::Shard(0)};
      local.Set(name, Value(*DTensor::Make(
                          *Tensor::Meta(*ComputeLocalShape(t.shape(), *mesh, mine, rank), t.dtype()),
                          mesh, mine, t.shape())));
    }
    DistributeOptions options;
    options.rank = rank;
    const RouteCacheCounts before = RouteCacheCountsNow();
    EXPECT_TRUE(DistributeStateDict(full, local, options).ok());
    const bool hit = RouteCacheCountsNow().hits == before.hits + 1;
    const Tensor& w = local.Find("layer.w")->as_dtensor().local();
    const DTensor want = *DistributeTensor(full.Find("layer.w")->as_tensor(), mesh,
                                           *ParsePlacements(placements), rank);
    EXPECT_EQ(w.shape(), want.local().shape()) << placements << " rank " << rank;
    const Tensor a = *w.Contiguous();
    const Tensor b = *want.local().Contiguous();
    EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), static_cast<size_t>(a.nbytes())), 0)
        << placements << " rank " << rank;
    return hit;
  };
  call("[S(0)]", 0);
  EXPECT_TRUE(call("[S(0)]", 0));
  EXPECT_FALSE(call("[S(1)]", 0));
  EXPECT_FALSE(call("[S(1)]", 1));
  EXPECT_TRUE(call("[S(0)]", 0));
}

TEST(RouteCacheTest, TheLeastRecentlyUsedRouteGoesFirst) {
  const Answer kept = Route({Weight("lru.kept")});
  for (int i = 0; i < internal::kMaxCachedRoutes - 1; ++i) {
    EXPECT_FALSE(Route({Weight(absl::StrCat("lru.", i))}).hit);
    EXPECT_TRUE(Route({Weight("lru.kept")}).hit);  // used again: stays
  }
  EXPECT_FALSE(Route({Weight("lru.new")}).hit);  // drops lru.0, the least recently used
  EXPECT_TRUE(Route({Weight("lru.kept")}).hit);
  EXPECT_FALSE(Route({Weight("lru.0")}).hit);
}

TEST(RouteCacheTest, ErrorsAreNotKept) {
  TransferTensor bad = Weight("bad");
  bad.shape = {-1, 8};
  for (int i = 0; i < 2; ++i) {
    const RouteCacheCounts before = RouteCacheCountsNow();
    TransferPlanOptions plan_options;
    plan_options.rank = 0;
    EXPECT_EQ(RouteTransfer(internal::DescribedTransfer({&bad, 1}), plan_options, {}).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(RouteCacheCountsNow().misses, before.misses + 1);
  }
}

// A thread's reused descriptors come back cleared, whatever the last call left in them.
TEST(RouteCacheTest, ReusedDescriptorsComeBackCleared) {
  absl::Span<TransferTensor> first = internal::ReusedDescriptors(3);
  ASSERT_EQ(first.size(), 3u);
  first[1] = Weight("left.behind");
  first[1].source.boxes.push_back({{0, 0}, {12, 8}, 0});
  first[1].allow_uncovered = true;
  first[2].dtype = DType::kBFloat16;
  absl::Span<TransferTensor> again = internal::ReusedDescriptors(2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again.data(), first.data());  // the same memory
  const TransferTensor& t = again[1];
  EXPECT_TRUE(t.name.empty());
  EXPECT_TRUE(t.shape.empty());
  for (const internal::TransferLayout* side : {&t.source, &t.destination}) {
    EXPECT_EQ(side->mesh, nullptr);
    EXPECT_TRUE(side->placements.empty());
    EXPECT_TRUE(side->boxes.empty());
  }
  EXPECT_FALSE(t.allow_uncovered);
  EXPECT_EQ(internal::ReusedDescriptors(3)[2].dtype, DType::kFloat32);
}

}  // namespace
}  // namespace sdrt::test
