// Multi-rank tests of core/distributed/distributed_state_dict.h on 2x4 meshes: CTest runs this
// binary under `mpiexec -n 8` only (a 2x4 mesh needs 8 ranks; with fewer every test skips).
// case-010 as reported, then a gather and a broadcast of a mixed state
// dict with HSDP [R, S(0)], FSDP2+TP [_S(0, 4), S(0)] and [_S(0, 2), S(0)], 2-D
// [S(0), S(1)], FSDP [S(0)] over all 8 ranks, Partial, a ShardedTensor and non-tensor
// leaves. 8 ranks on a small machine make each collective slow (MPICH busy-polls), so
// buckets are large and the whole binary stays within a few dozen collectives.
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

constexpr int64_t kBigBucket = int64_t{1} << 30;

void PrintStats(const char* what, const TransferStats& stats) {
  if (Rank() != 0) return;
  std::printf("%s, N=8: %lld collectives, %lld exchanges\n", what,
              static_cast<long long>(stats.collectives),
              static_cast<long long>(stats.exchanges));
}

// case-010: mesh 2 (data parallel) x 4 (tensor parallel); (1, 17) [Shard(0), Replicate]
// from rank 0 into meta DTensors. The ranks at data-parallel coordinate 0 (ranks 0-3)
// get a (1, 17) local equal to the full tensor, the others (0, 17); global shape (1, 17)
// and global stride (17, 1) everywhere.
TEST(DistributedStateDictNp8Mpi, Case010DimZeroSmallerThanDataParallelSize) {
  if (WorldSize() != 8) GTEST_SKIP() << "case-010 is on a 2x4 mesh";
  const Spec s = DSpec("w", {1, 17}, DType::kFloat32, Mesh({2, 4}), "[S(0), R]");
  Map local{{"w", MetaLeaf(s)}};
  const Map full = Rank() == 0 ? Map{{"w", s.Full()}} : Map{};
  TransferStats stats;
  BroadcastOptions options;
  options.comm = g_world;
  options.bucket_bytes = kBigBucket;
  options.stats = &stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ASSERT_EQ(local.Find("w")->kind(), ValueKind::kDTensor);
  const DTensor& dt = local.Find("w")->as_dtensor();
  EXPECT_EQ(dt.global_shape(), (IntVector{1, 17}));
  EXPECT_EQ(StrideOrContiguous(dt.global_stride(), dt.global_shape()), (IntVector{17, 1}));
  EXPECT_EQ(PlacementsToString(dt.placements()), "[S(0), R]");
  EXPECT_EQ(dt.local().shape(), (IntVector{Rank() < 4 ? 1 : 0, 17}));
  ExpectSameTensor(dt.local(), Rank() < 4 ? s.Full() : *Tensor::Zeros({0, 17}, DType::kFloat32),
                   "w");
  PrintStats("case-010 broadcast", stats);
}

// The mixed state dict on 2x4 (HSDP: 2 replicas of 4 shards; FSDP2 over TP with the TP
// size as split factor, and with 2) and on the 1-D mesh of 8.
Map Mixed2x4(const LeafFn& leaf, bool placeholders = false) {
  const auto m24 = Mesh({2, 4});
  const auto m8 = Mesh({8});
  const bool p = placeholders;
  Map model;
  model.Set("hsdp", leaf(DSpec("model.hsdp", {10, 6}, DType::kFloat32, m24, "[R, S(0)]")));
  model.Set("hsdp_bf16",
            leaf(DSpec("model.hsdp_bf16", {3, 5}, DType::kBFloat16, m24, "[R, S(0)]")));
  model.Set("fsdp_tp",
            leaf(DSpec("model.fsdp_tp", {16, 4}, DType::kBFloat16, m24, "[_S(0, 4), S(0)]")));
  model.Set("fsdp_tp_uneven",
            leaf(DSpec("model.fsdp_tp_uneven", {15, 3}, DType::kFloat32, m24, "[_S(0, 2), S(0)]")));
  model.Set("tp2d", leaf(DSpec("model.tp2d", {5, 9}, DType::kFloat64, m24, "[S(0), S(1)]")));
  model.Set("fsdp", leaf(DSpec("model.fsdp", {13, 2}, DType::kInt64, m8, "[S(0)]")));
  model.Set("fsdp_few_rows",
            leaf(DSpec("model.fsdp_few_rows", {3, 4}, DType::kInt8, m8, "[S(0)]")));
  model.Set("partial",
            leaf(DSpec("model.partial", {4, 4}, DType::kFloat32, m24, "[P(sum), S(1)]")));
  model.Set("scalar", leaf(PlainSpec("model.scalar", {}, DType::kFloat32)));
  model.Set("bias", leaf(PlainSpec("model.bias", {6}, DType::kFloat16)));
  model.Set("chunk_st",
            leaf(SSpec("model.chunk_st", {11, 3}, DType::kFloat32, ChunkShards({11, 3}, 0))));
  return Map{{"model", model},
             {"layers",
              List{Map{{"w", leaf(DSpec("layers.0.w", {9}, DType::kInt32, m24, "[S(0), S(0)]"))}}}},
             {"pair", Tuple{p ? 0 : 1, p ? "" : "two"}},
             {"epoch", p ? 0 : 12}};
}

// Gather with one bucket, then a broadcast of the full state dict into meta DTensors with
// one bucket: every rank checks its full tensors, then its pieces.
TEST(DistributedStateDictNp8Mpi, GatherAndBroadcastMixedOn2x4) {
  if (WorldSize() != 8) GTEST_SKIP() << "2x4 meshes need 8 ranks";
  const Map sharded = Mixed2x4(ShardedLeaf);
  const Map checkpoint = Mixed2x4(FullLeaf);
  TransferStats gather_stats;
  GatherOptions gather;
  gather.comm = g_world;
  gather.bucket_bytes = kBigBucket;
  gather.stats = &gather_stats;
  absl::StatusOr<Map> got = GatherStateDict(sharded, gather);
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  ExpectTreeEq(*got, checkpoint, "");
  PrintStats("mixed gather", gather_stats);
  if (!NoRankFailed()) return;

  Map local = Mixed2x4(MetaLeaf, /*placeholders=*/true);
  const Map full = Rank() == 0 ? checkpoint : Map{};
  TransferStats broadcast_stats;
  BroadcastOptions broadcast;
  broadcast.comm = g_world;
  broadcast.bucket_bytes = kBigBucket;
  broadcast.stats = &broadcast_stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, broadcast);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  EXPECT_TRUE(result->missing_keys.empty());
  EXPECT_TRUE(result->unexpected_keys.empty());
  ExpectTreeEq(local, Mixed2x4(ExpectedFromMetaLeaf), "");
  // Everything fits in one bucket: one point-to-point exchange for the sharded tensors and
  // one broadcast for those every rank keeps whole; two agreements, a third on the plan made
  // from the ShardedTensors' boxes, and the closing.
  EXPECT_GE(broadcast_stats.exchanges, 1);
  EXPECT_LE(broadcast_stats.exchanges, 2);
  EXPECT_EQ(broadcast_stats.collectives, 4 + broadcast_stats.exchanges);
  PrintStats("mixed broadcast", broadcast_stats);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
