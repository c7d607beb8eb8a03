// GatherStateDict over MPI through the transfer engine's point-to-point exchanges
// (core/distributed/internal/engine/transfer.h): pieces of 64 KiB and more go straight
// into place, smaller ones packed, and only to the ranks that keep. Mixed here in one state dict: large Shard(0)
// pieces (direct), large Shard(1) pieces (not one range of the full tensor: packed), a
// large piece of a transposed (strided) local, uneven and empty pieces, small tensors,
// a 2-D mesh, Replicate, ShardedTensor boxes large and small, and a 0-dim tensor; in one
// bucket and in buckets of 96 KiB; every rank keeping, and ranks_only {0} and {last}.
// Every element of every result is compared with the full tensor.
// Part of gather_mpi_test (CTest runs it under `mpiexec -n N` for N = 1 to 4).
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"

namespace sdrt::test {
namespace {

std::vector<Spec> Specs() {
  const int n = WorldSize();
  const auto line = Mesh({n});
  std::vector<Spec> specs = {
      DSpec("big_rows", {1000, 100}, DType::kFloat32, line, "[S(0)]"),
      DSpec("big_cols", {300, 400}, DType::kBFloat16, line, "[S(1)]"),
      DSpec("uneven", {7 * n + 3, 5}, DType::kInt64, line, "[S(0)]"),
      DSpec("tiny", {2}, DType::kFloat32, line, "[S(0)]"),
      DSpec("replicated", {600, 64}, DType::kFloat32, line, "[R]"),
      SSpec("boxes_big", {900, 80}, DType::kFloat32, ChunkShards({900, 80}, 0)),
      SSpec("boxes_small", {8}, DType::kInt32, Case002Shards(RoundRobin)),
      PlainSpec("step", {}, DType::kInt64),
  };
  for (int i = 0; i < 40; ++i) {
    specs.push_back(DSpec(absl::StrCat("small.", i), {16 + i, 3}, DType::kFloat16, line, "[S(0)]"));
  }
  if (n % 2 == 0) {
    specs.push_back(DSpec("mesh2d", {512, 256}, DType::kFloat32, Mesh({2, n / 2}), "[S(0), S(1)]"));
  }
  return specs;
}

// The transposed-local leaf: a [400, 700] float32 tensor whose rank's local is a strided
// view (the transpose of a contiguous [cols, rows] buffer), Shard(0).
Value TransposedLeaf(const Spec& s) {
  const DTensor dense = *DistributeTensor(s.Full(), s.mesh, s.placements, Rank());
  const Tensor& local = dense.local();
  const int64_t rows = local.shape()[0];
  const int64_t cols = local.shape()[1];
  const Tensor backing = *Tensor::Empty({cols, rows}, local.dtype());
  Tensor view = *Tensor::FromStorage(backing.storage(), local.dtype(), {rows, cols}, {1, rows});
  EXPECT_TRUE(view.CopyFrom(local).ok());
  return *DTensor::Make(view, s.mesh, s.placements, s.shape);
}

void GatherAndCheck(int64_t bucket_bytes, std::vector<int> ranks_only) {
  std::vector<Spec> specs = Specs();
  const Spec strided = DSpec("strided", {400, 700}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]");
  Map sharded;
  Map want;
  for (const Spec& s : specs) {
    sharded.Set(s.path, ShardedLeaf(s));
    want.Set(s.path, s.Full());
  }
  sharded.Set(strided.path, TransposedLeaf(strided));
  want.Set(strided.path, strided.Full());
  GatherOptions options;
  options.comm = g_world;
  options.bucket_bytes = bucket_bytes;
  options.ranks_only = ranks_only;
  TransferStats stats;
  options.stats = &stats;
  absl::StatusOr<Map> got = GatherStateDict(sharded, options);
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  const bool keeps = ranks_only.empty() ||
                     std::find(ranks_only.begin(), ranks_only.end(), Rank()) != ranks_only.end();
  if (!keeps) {
    EXPECT_TRUE(got->empty());
    return;
  }
  ExpectTreeEq(*got, want, "");
  if (WorldSize() > 1) {
    EXPECT_GE(stats.exchanges, bucket_bytes < (int64_t{1} << 20) ? 3 : 1);
    // The agreement (with the ShardedTensors' boxes), the agreement on the plan made from
    // them, the exchanges and the closing.
    EXPECT_EQ(stats.collectives, 3 + stats.exchanges);
  }
}

TEST(GatherExchangeMpi, OneBucketEveryRankKeeps) { GatherAndCheck(int64_t{256} << 20, {}); }

TEST(GatherExchangeMpi, SmallBucketsEveryRankKeeps) { GatherAndCheck(96 << 10, {}); }

TEST(GatherExchangeMpi, OnlyRankZeroKeeps) { GatherAndCheck(int64_t{256} << 20, {0}); }

TEST(GatherExchangeMpi, OnlyTheLastRankKeepsInSmallBuckets) {
  GatherAndCheck(96 << 10, {WorldSize() - 1});
}

}  // namespace
}  // namespace sdrt::test
