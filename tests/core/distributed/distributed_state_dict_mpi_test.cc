// Multi-rank tests of core/distributed/distributed_state_dict.h over MPI: GatherStateDict,
// BroadcastStateDict and DistributeStateDict on the world communicator. CTest runs this
// binary under `mpiexec -n N` for N = 1, 2, 3, 4 (3 gives uneven and empty shards); every
// rank runs every test. Inputs are made from full tensors whose element i (row-major
// global index) holds a value computed from i and the tensor's path, so each rank checks
// its own pieces and results without communicating. Meshes follow the world size: the 1-D
// mesh of all ranks, 1xN and Nx1, and 2x2 when N == 4. The cases of
// docs/CASES.md (gather: case-001 to case-006; broadcast: case-010 to
// case-016) are named in the tests; case-010 on its 2x4 mesh is in
// distributed_state_dict_np8_mpi_test.cc. Rank 0 prints GoogleTest's usual output; other
// ranks print only their failures.
//
// Every rank must make the same collectives, so after each operation the ranks agree
// (AllTrue) on whether to go on: a check failing on one rank ends the test on all of them
// instead of leaving the others waiting.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The mixed state dict of issue 5, one tree per leaf function: FSDP [S(0)] (uneven and
// empty shards), HSDP [R, S(0)], 2-D [S(0), S(1)], FSDP2+TP [_S(0, 2), S(0)], Shard(1),
// _StridedShard, Partial, 0-dim DTensor and plain tensors, ShardedTensors (chunk layout and
// case-002's), every dtype, a tensor larger than 4 KiB, and non-tensor leaves (int,
// double, bool, string, bytes, None) in maps, lists and tuples. `placeholders` gives the
// non-tensor leaves other values (a broadcast target's, to be overwritten).
Map MixedStateDict(const LeafFn& leaf, bool placeholders = false) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const auto row = Mesh({1, n});
  const auto col = Mesh({n, 1});
  const auto m2 = n == 4 ? Mesh({2, 2}) : row;
  const bool p = placeholders;
  Map model;
  model.Set("fsdp", leaf(DSpec("model.fsdp", {7, 5}, DType::kFloat32, m1, "[S(0)]")));
  // case-001's shape.
  model.Set("case001", leaf(DSpec("model.case001", {5, 10}, DType::kFloat32, m1, "[S(0)]")));
  // Fewer rows than ranks from N = 3: empty shards.
  model.Set("few_rows", leaf(DSpec("model.few_rows", {2, 3}, DType::kBFloat16, m1, "[S(0)]")));
  // case-003 style: no rows at all.
  model.Set("no_rows", leaf(DSpec("model.no_rows", {0, 4}, DType::kFloat32, m1, "[S(0)]")));
  // case-005: uneven Shard(1).
  model.Set("case005", leaf(DSpec("model.case005", {3, 9}, DType::kFloat16, m1, "[S(1)]")));
  // case-006: uneven _StridedShard.
  model.Set("case006", leaf(DSpec("model.case006", {5}, DType::kFloat32, m1, "[_S(0, 2)]")));
  model.Set("hsdp", leaf(DSpec("model.hsdp", {6, 4}, DType::kFloat32, m2, "[R, S(0)]")));
  model.Set("hsdp_col", leaf(DSpec("model.hsdp_col", {5, 2}, DType::kInt64, col, "[R, S(0)]")));
  model.Set("tp2d", leaf(DSpec("model.tp2d", {5, 3}, DType::kFloat64, m2, "[S(0), S(1)]")));
  model.Set("tp2d_row", leaf(DSpec("model.tp2d_row", {4, 7}, DType::kInt32, row, "[S(1), S(0)]")));
  model.Set("fsdp_tp",
            leaf(DSpec("model.fsdp_tp", {8, 6}, DType::kBFloat16, m2, "[_S(0, 2), S(0)]")));
  model.Set("fsdp_tp_uneven",
            leaf(DSpec("model.fsdp_tp_uneven", {15, 5}, DType::kFloat32, m2, "[_S(0, 2), S(0)]")));
  model.Set("shard_twice",
            leaf(DSpec("model.shard_twice", {3, 4}, DType::kInt32, m2, "[S(0), S(0)]")));
  model.Set("replicated", leaf(DSpec("model.replicated", {4}, DType::kInt32, m1, "[R]")));
  model.Set("scalar", leaf(DSpec("model.scalar", {}, DType::kFloat32, m1, "[R]")));
  model.Set("bias", leaf(PlainSpec("model.bias", {5}, DType::kFloat64)));
  model.Set("partial", leaf(DSpec("model.partial", {3, 4}, DType::kFloat32, m1, "[P(sum)]")));
  model.Set("partial_2d",
            leaf(DSpec("model.partial_2d", {5, 4}, DType::kFloat32, m2, "[P(sum), S(1)]")));
  // 16 KiB: larger than a 1 KiB or a 4 KiB bucket.
  model.Set("big", leaf(DSpec("model.big", {64, 64}, DType::kFloat32, m1, "[S(1)]")));
  model.Set("chunk_st",
            leaf(SSpec("model.chunk_st", {5, 4}, DType::kFloat32, ChunkShards({5, 4}, 0))));
  model.Set("case002_st",
            leaf(SSpec("model.case002_st", {8}, DType::kFloat32, Case002Shards(RoundRobin))));
  Map dtypes;
  int i = 0;
  for (DType dtype : kWholeByteDTypes) {
    const std::string name(DTypeName(dtype));
    const bool two_d = i++ % 2 == 1;
    dtypes.Set(name, leaf(DSpec(absl::StrCat("dtypes.", name), {5, 3}, dtype, two_d ? m2 : m1,
                                two_d ? "[S(0), S(1)]" : "[S(0)]")));
  }
  dtypes.Set("plain_bool", leaf(PlainSpec("dtypes.plain_bool", {3}, DType::kBool)));
  Map state0;
  state0.Set("step", leaf(PlainSpec("optim.state.0.step", {}, DType::kFloat32)));
  state0.Set("exp_avg",
             leaf(DSpec("optim.state.0.exp_avg", {7, 5}, DType::kFloat32, m1, "[S(0)]")));
  state0.Set("exp_avg_sq",
             leaf(DSpec("optim.state.0.exp_avg_sq", {7, 5}, DType::kFloat32, m1, "[S(0)]")));
  Map group{{"lr", p ? 0.0 : 1e-3},
            {"betas", Tuple{p ? 0.0 : 0.9, p ? 0.0 : 0.999}},
            {"params", List{p ? 5 : 0, p ? 6 : 1}},
            {"name", p ? "" : "decay"},
            {"amsgrad", p},
            {"eps", None{}}};
  Map optim{{"state", Map{{"0", state0}}}, {"param_groups", List{group}}};
  Map layer0{{"w", leaf(DSpec("layers.0.w", {4, 3}, DType::kFloat32, m1, "[S(0)]"))}};
  Map layer1{{"w", leaf(PlainSpec("layers.1.w", {2, 2}, DType::kInt64))},
             {"v", leaf(DSpec("layers.1.v", {3}, DType::kInt8, m1, "[S(0)]"))}};
  return Map{{"model", model},
             {"dtypes", dtypes},
             {"optim", optim},
             {"layers", List{layer0, layer1}},
             {"pair", Tuple{leaf(DSpec("pair.0", {6}, DType::kInt16, m1, "[S(0)]")), p ? 0 : 7,
                            p ? "" : "seven"}},
             {"epoch", p ? 0 : 3},
             {"tag", p ? "" : "ckpt"},
             {"blob", Bytes{p ? "" : "\x01\x02"}},
             {"ratio", p ? 0.0 : 0.25},
             {"flag", !p},
             {"nothing", None{}}};
}

constexpr int64_t kBucketSizes[] = {1024, 4096, int64_t{1} << 20, int64_t{1} << 30};

// ---------------------------------------------------------------------------------------
// Gather.

// case-001 (5x10 Shard(0): rows 2,2,1,0 at N = 4), case-003 (a dim of size 0), case-005
// (uneven Shard(1)), case-006 (uneven _StridedShard) and case-002 (ShardedTensor) inside
// the mixed state dict, gathered with buckets from 1 KiB (tensors split over many
// buckets) to 1 GiB: the same full tensors, bit for bit, on every rank.
TEST(GatherStateDictMpi, MixedStateDictEveryBucketSize) {
  const Map sharded = MixedStateDict(ShardedLeaf);
  const Map want = MixedStateDict(FullLeaf);
  if (!NoRankFailed()) return;
  std::vector<TransferStats> stats(std::size(kBucketSizes));
  for (size_t b = 0; b < std::size(kBucketSizes); ++b) {
    SCOPED_TRACE(absl::StrCat("bucket_bytes ", kBucketSizes[b]));
    GatherOptions options;
    options.comm = g_world;
    options.bucket_bytes = kBucketSizes[b];
    options.stats = &stats[b];
    absl::StatusOr<Map> got = GatherStateDict(sharded, options);
    ASSERT_TRUE(AllTrue(got.ok())) << got.status();
    ExpectTreeEq(*got, want, "");
    // Plain tensors pass through as aliases.
    EXPECT_EQ(DataPtr(At(*got, "model.bias")), DataPtr(At(sharded, "model.bias")));
    EXPECT_GE(stats[b].collectives, stats[b].exchanges);
    if (Rank() == 0) {
      std::printf("gather N=%d bucket %lld: %lld collectives, %lld exchanges, %lld bytes sent\n",
                  WorldSize(), static_cast<long long>(kBucketSizes[b]),
                  static_cast<long long>(stats[b].collectives),
                  static_cast<long long>(stats[b].exchanges),
                  static_cast<long long>(stats[b].sent_bytes));
    }
    if (!NoRankFailed()) return;
  }
  if (WorldSize() > 1) {
    // 16 KiB of "big" alone needs more than one exchange of 1 KiB per rank.
    EXPECT_GT(stats[0].exchanges, stats[3].exchanges);
    EXPECT_GE(stats[0].exchanges, 2);
    EXPECT_GE(stats[3].exchanges, 1);
  }
}

// ranks_only {0} with cpu_offload: rank 0 gets the full state dict, every other rank an
// empty map; then ranks_only {N-1} without offload, with 1 KiB buckets.
TEST(GatherStateDictMpi, RanksOnlyWithCpuOffload) {
  const Map sharded = MixedStateDict(ShardedLeaf);
  const Map want = MixedStateDict(FullLeaf);
  for (int keeper : {0, WorldSize() - 1}) {
    SCOPED_TRACE(absl::StrCat("ranks_only {", keeper, "}"));
    GatherOptions options;
    options.comm = g_world;
    options.ranks_only = {keeper};
    options.cpu_offload = keeper == 0;
    options.bucket_bytes = keeper == 0 ? kDefaultBucketBytes : 1024;
    absl::StatusOr<Map> got = GatherStateDict(sharded, options);
    ASSERT_TRUE(AllTrue(got.ok())) << got.status();
    if (Rank() == keeper) {
      ExpectTreeEq(*got, want, "");
    } else {
      EXPECT_TRUE(got->empty()) << DebugString(*got);
    }
    if (!NoRankFailed()) return;
  }
}

// comm == nullptr gathers over the MPI world.
TEST(GatherStateDictMpi, DefaultCommunicatorIsTheMpiWorld) {
  const Spec spec = DSpec("w", {5, 10}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]");
  absl::StatusOr<Map> got = GatherStateDict(Map{{"w", ShardedLeaf(spec)}});
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  ExpectTreeEq(*got, Map{{"w", spec.Full()}}, "");
}

// Partial placements whose ranks hold different values (not made by DistributeTensor):
// rank r holds i + r under P(sum) (int64: the sum is N i + N(N-1)/2) and i (r + 1) under
// P(max) (int32: the max is N i); at N == 4 also [P(sum), S(0)] on 2x2 (float32, the
// coordinate-0 half holds the piece, the other half the piece + 1).
TEST(GatherStateDictMpi, PartialSumAndMaxAreReduced) {
  const int n = WorldSize();
  const int r = Rank();
  const auto m1 = Mesh({n});
  Tensor sum_local = *Tensor::Empty({3, 4}, DType::kInt64);
  Tensor max_local = *Tensor::Empty({3, 4}, DType::kInt32);
  for (int64_t i = 0; i < 12; ++i) {
    sum_local.data<int64_t>()[i] = i + r;
    max_local.data<int32_t>()[i] = static_cast<int32_t>(i * (r + 1));
  }
  Map sd{{"sum", *DTensor::Make(sum_local, m1, PlacementsOf("[P(sum)]"), {3, 4})},
         {"nested", Map{{"max", *DTensor::Make(max_local, m1, PlacementsOf("[P(max)]"), {3, 4})}}}};
  Tensor want_sum = *Tensor::Empty({3, 4}, DType::kInt64);
  Tensor want_max = *Tensor::Empty({3, 4}, DType::kInt32);
  for (int64_t i = 0; i < 12; ++i) {
    want_sum.data<int64_t>()[i] = n * i + n * (n - 1) / 2;
    want_max.data<int32_t>()[i] = static_cast<int32_t>(n * i);
  }
  Map want{{"sum", want_sum}, {"nested", Map{{"max", want_max}}}};
  Tensor full2d = ValuePattern({6, 4}, DType::kFloat32, 11);
  if (n == 4) {
    const auto m2 = Mesh({2, 2});
    const std::vector<Placement> p = PlacementsOf("[P(sum), S(0)]");
    Tensor piece = *(*DistributeTensor(full2d, m2, PlacementsOf("[R, S(0)]"), r)).local().Clone();
    if (r / 2 == 1) {
      for (int64_t i = 0; i < piece.numel(); ++i) piece.data<float>()[i] += 1.0f;
    }
    sd.Set("sum_2d", *DTensor::Make(piece, m2, p, {6, 4}));
    Tensor want2d = *full2d.Clone();
    for (int64_t i = 0; i < 24; ++i) {
      want2d.data<float>()[i] = 2.0f * want2d.data<float>()[i] + 1.0f;
    }
    want.Set("sum_2d", want2d);
  }
  for (int64_t bucket : {int64_t{16}, kDefaultBucketBytes}) {
    GatherOptions options;
    options.comm = g_world;
    options.bucket_bytes = bucket;
    absl::StatusOr<Map> got = GatherStateDict(sd, options);
    ASSERT_TRUE(AllTrue(got.ok())) << got.status();
    ExpectTreeEq(*got, want, "");
    // The local tensors are not reduced in place.
    EXPECT_EQ(sum_local.data<int64_t>()[1], 1 + r);
    if (!NoRankFailed()) return;
  }
}

// ShardedTensors: FSDP1's chunk layout (2-D, trailing shards empty), case-002's metadata
// with several shards per rank (round robin, then sparing the last rank), case-002's
// dim of size 0, and case-003's (1, 0, 2) shard on every rank.
TEST(GatherStateDictMpi, Case002Case003ShardedTensorsAreGatheredByOffsets) {
  const int n = WorldSize();
  std::vector<Spec> specs = {
      SSpec("chunk", {5, 3}, DType::kFloat64, ChunkShards({5, 3}, 0)),
      SSpec("chunk_dim1", {2, 7}, DType::kInt32, ChunkShards({2, 7}, 1)),
      SSpec("case002", {8}, DType::kFloat32, Case002Shards(RoundRobin)),
      SSpec("case002_sparing", {8}, DType::kFloat32, Case002Shards(RoundRobinSparingLastRank)),
      SSpec("case002_empty", {0}, DType::kFloat32, {{{0}, {0}, {0, Device::CPU()}}}),
  };
  std::vector<ShardMetadata> case003;
  for (int r = 0; r < n; ++r) case003.push_back({{r, 0, 0}, {1, 0, 2}, {r, Device::CPU()}});
  specs.push_back(SSpec("case003", {n, 0, 2}, DType::kInt64, case003));
  Map sd;
  Map want;
  for (const Spec& s : specs) {
    sd.Set(s.path, ShardedLeaf(s));
    want.Set(s.path, s.Full());
  }
  for (int64_t bucket : {int64_t{8}, kDefaultBucketBytes}) {
    GatherOptions options;
    options.comm = g_world;
    options.bucket_bytes = bucket;
    absl::StatusOr<Map> got = GatherStateDict(sd, options);
    ASSERT_TRUE(AllTrue(got.ok())) << got.status();
    ExpectTreeEq(*got, want, "");
    if (!NoRankFailed()) return;
  }
}

// 200 DTensors of 1 KiB (full) with 1 MiB buckets: one bucket, a handful of collectives.
TEST(GatherStateDictMpi, ManySmallTensorsFewCollectives) {
  const auto m1 = Mesh({WorldSize()});
  Map sd;
  Map want;
  for (int i = 0; i < 200; ++i) {
    const Spec s = DSpec(absl::StrCat("p", i), {256}, DType::kFloat32, m1, "[S(0)]");
    sd.Set(s.path, ShardedLeaf(s));
    want.Set(s.path, s.Full());
  }
  TransferStats stats;
  GatherOptions options;
  options.comm = g_world;
  options.bucket_bytes = int64_t{1} << 20;
  options.stats = &stats;
  absl::StatusOr<Map> got = GatherStateDict(sd, options);
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  ExpectTreeEq(*got, want, "");
  // One exchange: the small pieces between two ranks travel as one message.
  EXPECT_LE(stats.exchanges, 1);
  EXPECT_LE(stats.collectives, 6) << "exchanges " << stats.exchanges;
  if (Rank() == 0) {
    std::printf("gather 200 x 1 KiB, N=%d: %lld collectives, %lld exchanges\n", WorldSize(),
                static_cast<long long>(stats.collectives),
                static_cast<long long>(stats.exchanges));
  }
}

// case-004: rank r holds (2, 2 + r) under [Shard(1)]; not the chunk layout, so every rank
// gets the same error naming the key and the expected and actual local shapes.
TEST(GatherStateDictMpi, Case004LocalsNotTheChunkLayoutFailOnEveryRank) {
  const int n = WorldSize();
  const int64_t width = 2 * n + n * (n - 1) / 2;  // 14 at N = 4
  Map sd{{"layer", Map{{"weight", *DTensor::Make(ValuePattern({2, 2 + Rank()}, DType::kFloat32, 1),
                                                 Mesh({n}), PlacementsOf("[S(1)]"), {2, width})}}}};
  absl::StatusOr<Map> got = GatherStateDict(sd, WorldGather());
  ExpectSameStatusOnEveryRank(got.status());
  if (n == 1) {  // one rank always holds the chunk layout
    EXPECT_TRUE(got.ok()) << got.status();
    return;
  }
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("layer.weight"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("[2, 2]"));
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr(absl::StrCat("[2, ", ChunkSize(width, n), "]")));
}

// A wrong local shape after a right one of the same mesh, placements and global shape (the
// expected shape is then known from the first): the same error, naming the second key.
TEST(GatherStateDictMpi, WrongLocalShapeAfterARightOneOfTheSameLayoutFails) {
  const int n = WorldSize();
  const Spec right = DSpec("a_right", {8, 3}, DType::kFloat32, Mesh({n}), "[S(0)]");
  const int64_t rows = ChunkSize(8, n);
  const Value model = ShardedLeaf(right);
  Map sd{{"a_right", model},
         {"b_wrong", *DTensor::Make(ValuePattern({rows + 1, 3}, DType::kFloat32, 2),
                                    model.as_dtensor().mesh(),
                                    PlacementsOf("[S(0)]"), {8, 3})}};
  absl::StatusOr<Map> got = GatherStateDict(sd, WorldGather());
  ExpectSameStatusOnEveryRank(got.status());
  ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("'b_wrong'"));
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr(absl::StrCat("holds local shape [", rows + 1, ", 3]")));
}

// A DTensor whose local is a meta tensor has nothing to gather.
TEST(GatherStateDictMpi, MetaTensorIsFailedPreconditionOnEveryRank) {
  const Spec s = DSpec("w", {4, 4}, DType::kFloat32, Mesh({WorldSize()}), "[S(0)]");
  absl::StatusOr<Map> got = GatherStateDict(Map{{"w", MetaLeaf(s)}}, WorldGather());
  ExpectSameStatusOnEveryRank(got.status());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition) << got.status();
  EXPECT_THAT(got.status().message(),
              HasSubstr("'w': the local tensor is on meta (no data to gather)"));
  GatherOptions zero = WorldGather();
  zero.bucket_bytes = 0;
  got = GatherStateDict(Map{{"w", ShardedLeaf(s)}}, zero);
  ExpectSameStatusOnEveryRank(got.status());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("bucket_bytes must be at least 1, got 0"));
}

// ---------------------------------------------------------------------------------------
// Broadcast.

// The full tensors a broadcast into MetaLeaf's tree moves (None locals take none).
Value MovedIntoMetaLeaf(const Spec& s) {
  if (MetaLeaf(s).is_none()) return None{};
  return s.Full();
}

// Broadcasts the mixed checkpoint from `root` into `local` and checks the result; `moved`
// holds the full tensors that must travel (for the statistics).
void BroadcastAndCheck(Map& local, const Map& want, const Map& moved, int root, int64_t bucket,
                       bool cpu_offload = false) {
  const Map full = Rank() == root ? MixedStateDict(FullLeaf) : Map{};
  TransferStats stats;
  BroadcastOptions options;
  options.comm = g_world;
  options.root = root;
  options.bucket_bytes = bucket;
  options.cpu_offload = cpu_offload;
  options.stats = &stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  EXPECT_THAT(result->missing_keys, IsEmpty());
  EXPECT_THAT(result->unexpected_keys, IsEmpty());
  ExpectTreeEq(local, want, "");
  const int64_t bytes = TensorBytes(moved);
  if (WorldSize() > 1 && bytes > 0) {
    EXPECT_GE(stats.exchanges, 1);
  }
  if (Rank() == root) {
    // Only the root sends: what the others keep of every tensor, at most every byte once
    // per other rank; and in exchanges of at most a bucket each.
    EXPECT_LE(stats.sent_bytes, bytes * (WorldSize() - 1));
    if (WorldSize() > 1 && bytes > 0) {
      EXPECT_GT(stats.sent_bytes, 0);
    }
    EXPECT_EQ(stats.received_bytes, 0);
  } else {
    EXPECT_EQ(stats.sent_bytes, 0);
  }
  EXPECT_GE(stats.collectives, 2 + stats.exchanges);
  if (Rank() == 0) {
    std::printf("broadcast N=%d root %d bucket %lld: %lld collectives, %lld exchanges\n",
                WorldSize(), root, static_cast<long long>(bucket),
                static_cast<long long>(stats.collectives),
                static_cast<long long>(stats.exchanges));
  }
}

// The mixed checkpoint from rank 0 and from rank N-1 into meta DTensors, None and zero
// plain tensors and zero ShardedTensors, with every bucket size (tensors split across 1
// KiB buckets): every rank ends with its pieces; non-tensor leaves are the checkpoint's.
TEST(BroadcastStateDictMpi, MixedIntoMetaDTensorsEveryBucketSizeAndRoot) {
  const Map want = MixedStateDict(ExpectedFromMetaLeaf);
  const Map moved = MixedStateDict(MovedIntoMetaLeaf);
  std::vector<int> roots = {0};
  if (WorldSize() > 1) roots.push_back(WorldSize() - 1);
  for (int root : roots) {
    for (int64_t bucket : kBucketSizes) {
      SCOPED_TRACE(absl::StrCat("root ", root, ", bucket_bytes ", bucket));
      Map local = MixedStateDict(MetaLeaf, /*placeholders=*/true);
      BroadcastAndCheck(local, want, moved, root, bucket);
      if (!NoRankFailed()) return;
    }
  }
}

// Into DTensors with data: each local is written in place (same storage).
TEST(BroadcastStateDictMpi, IntoDTensorsWithDataInPlace) {
  const Map want = MixedStateDict(ExpectedPieceLeaf);
  for (bool cpu_offload : {false, true}) {
    SCOPED_TRACE(absl::StrCat("cpu_offload ", cpu_offload));
    Map local = MixedStateDict(ZeroLeaf, /*placeholders=*/true);
    const std::vector<std::string> paths = {"model.fsdp",     "model.fsdp_tp",    "model.tp2d",
                                            "model.chunk_st", "model.case002_st", "pair.0"};
    std::vector<const void*> before;
    for (const std::string& path : paths) before.push_back(DataPtr(At(local, path)));
    BroadcastAndCheck(local, want, MixedStateDict(FullLeaf), 0, 4096, cpu_offload);
    for (size_t i = 0; i < paths.size(); ++i) {
      EXPECT_EQ(DataPtr(At(local, paths[i])), before[i]) << paths[i] << " not written in place";
    }
    if (!NoRankFailed()) return;
  }
}

// A plain tensor is replaced by the full tensor; a None leaf takes nothing (as PyTorch's
// _broadcast_tensors; the header's comment says it is replaced: reported); ShardedTensors
// are filled in place.
TEST(BroadcastStateDictMpi, IntoPlainTensorsAndShardedTensors) {
  const Spec st = SSpec("st", {6, 5}, DType::kInt32, ChunkShards({6, 5}, 1));
  const Spec a = PlainSpec("a", {4, 3}, DType::kFloat32);
  const Spec b = PlainSpec("b", {7}, DType::kBFloat16);
  const Map full = Rank() == 0 ? Map{{"a", a.Full()}, {"b", b.Full()}, {"st", st.Full()}} : Map{};
  Map local{{"a", None{}},
            {"b", *Tensor::Zeros({7}, DType::kBFloat16)},
            {"st", MakeSharded(st, nullptr)}};
  std::vector<const void*> shard_ptrs;
  for (const LocalShard& s : local.Find("st")->as_sharded().local_shards()) {
    shard_ptrs.push_back(s.tensor.data_ptr());
  }
  BroadcastOptions options;
  options.comm = g_world;
  options.bucket_bytes = 32;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ExpectTreeEq(local, Map{{"a", None{}}, {"b", b.Full()}, {"st", ShardedLeaf(st)}}, "");
  const auto& shards = local.Find("st")->as_sharded().local_shards();
  for (size_t i = 0; i < shards.size() && i < shard_ptrs.size(); ++i) {
    EXPECT_EQ(shards[i].tensor.data_ptr(), shard_ptrs[i]) << "shard " << i << " not in place";
  }
}

// strict false keeps local-only leaves; strict true removes them; both report missing
// keys in local's order and unexpected keys in the checkpoint's.
TEST(BroadcastStateDictMpi, StrictReportsMissingAndUnexpectedKeys) {
  const auto m1 = Mesh({WorldSize()});
  const Spec w = DSpec("model.w", {6, 4}, DType::kFloat32, m1, "[S(0)]");
  const Spec extra = PlainSpec("model.extra", {3}, DType::kInt64);
  const Spec mine = DSpec("model.only_local", {2, 2}, DType::kFloat32, m1, "[S(0)]");
  const Map full =
      Rank() == 0 ? Map{{"model", Map{{"w", w.Full()}, {"extra", extra.Full()}}}, {"n", 5}} : Map{};
  for (bool strict : {false, true}) {
    SCOPED_TRACE(absl::StrCat("strict ", strict));
    Map local{{"model", Map{{"w", MetaLeaf(w)}, {"only_local", MetaLeaf(mine)}}}, {"n2", 1}};
    BroadcastOptions options;
    options.comm = g_world;
    options.strict = strict;
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
    ASSERT_TRUE(AllTrue(result.ok())) << result.status();
    EXPECT_THAT(result->missing_keys, ElementsAre("model.only_local", "n2"));
    EXPECT_THAT(result->unexpected_keys, ElementsAre("model.extra", "n"));
    if (strict) {
      ExpectTreeEq(local, Map{{"model", Map{{"w", ShardedLeaf(w)}}}}, "");
    } else {
      ExpectTreeEq(
          local,
          Map{{"model", Map{{"w", ShardedLeaf(w)}, {"only_local", MetaLeaf(mine)}}}, {"n2", 1}},
          "");
    }
    if (!NoRankFailed()) return;
  }
}

// 200 plain tensors of 1 KiB into meta DTensors and plain tensors with 1 MiB buckets: one
// bucket.
TEST(BroadcastStateDictMpi, ManySmallTensorsFewCollectives) {
  const auto m1 = Mesh({WorldSize()});
  Map full;
  Map local;
  Map want;
  for (int i = 0; i < 200; ++i) {
    const Spec s = i % 2 == 0 ? DSpec(absl::StrCat("p", i), {256}, DType::kFloat32, m1, "[S(0)]")
                              : PlainSpec(absl::StrCat("p", i), {256}, DType::kFloat32);
    if (Rank() == 0) full.Set(s.path, s.Full());
    local.Set(s.path, i % 2 == 0 ? MetaLeaf(s) : ZeroLeaf(s));
    want.Set(s.path, ExpectedPieceLeaf(s));
  }
  TransferStats stats;
  BroadcastOptions options;
  options.comm = g_world;
  options.bucket_bytes = int64_t{1} << 20;
  options.stats = &stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ExpectTreeEq(local, want, "");
  // One point-to-point exchange for the DTensors' pieces, one broadcast for the plain
  // tensors every rank keeps whole; two agreements and the closing.
  const int n = WorldSize();
  if (n > 1) {
    EXPECT_EQ(stats.exchanges, 2);
    EXPECT_EQ(stats.collectives, 5);
  }
  if (Rank() == 0 && n > 1) {
    // The others' shares of each DTensor (rank 0 keeps its chunk of 256 floats), every
    // other rank's copy of each plain tensor.
    const int64_t own = (256 + n - 1) / n * 4;
    EXPECT_EQ(stats.sent_bytes, 100 * (1024 - own) + 100 * 1024 * (n - 1));
  }
  if (Rank() == 0) {
    std::printf("broadcast 200 x 1 KiB, N=%d: %lld collectives, %lld exchanges\n", n,
                static_cast<long long>(stats.collectives),
                static_cast<long long>(stats.exchanges));
  }
}

// case-010 on the meshes this rank count allows (the 2x4 original is in the np8 test):
// (1, 17) [Shard(0), Replicate] into meta DTensors; the ranks at data-parallel coordinate
// 0 get the row, the others a (0, 17) local; the global shape and stride are kept.
TEST(BroadcastStateDictMpi, Case010DimZeroSmallerThanDataParallelSize) {
  const int n = WorldSize();
  const auto mesh = n == 4 ? Mesh({2, 2}) : Mesh({n, 1});
  const Spec s = DSpec("w", {1, 17}, DType::kFloat32, mesh, "[S(0), R]");
  Map local{{"w", MetaLeaf(s)}};
  const Map full = Rank() == 0 ? Map{{"w", s.Full()}} : Map{};
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ASSERT_EQ(local.Find("w")->kind(), ValueKind::kDTensor);
  const DTensor& dt = local.Find("w")->as_dtensor();
  EXPECT_EQ(dt.global_shape(), (IntVector{1, 17}));
  EXPECT_EQ(StrideOrContiguous(dt.global_stride(), dt.global_shape()), (IntVector{17, 1}));
  const int64_t dp = (*mesh->Coordinate(Rank()))[0];
  ExpectSameTensor(dt.local(), dp == 0 ? s.Full() : *Tensor::Zeros({0, 17}, DType::kFloat32), "w");
}

// case-013: CPU tensors with the CPU device requested (a GPU backend stages them; here
// the MPI backend moves them): a checkpoint key local lacks is only reported; a plain
// local tensor is replaced by the checkpoint's, on the CPU.
TEST(BroadcastStateDictMpi, Case013CpuTensorsWithCpuDevice) {
  const Map full = Rank() == 0 ? Map{{"key", *Tensor::Zeros({1}, DType::kFloat32)}} : Map{};
  BroadcastOptions options;
  options.comm = g_world;
  options.device = Device::CPU();
  Map local;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  EXPECT_TRUE(local.empty());
  EXPECT_THAT(result->unexpected_keys, ElementsAre("key"));
  local.Set("key", ValuePattern({1}, DType::kFloat32, 1));
  options.cpu_offload = true;
  result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ExpectTreeEq(local, Map{{"key", *Tensor::Zeros({1}, DType::kFloat32)}}, "");
}

// Partial placements: the rank at coordinate 0 of the Partial mesh dim keeps the value;
// P(sum) gives the others zeros; whatever the others hold, gathering the result reduces
// back to the checkpoint.
TEST(BroadcastStateDictMpi, PartialPlacementsKeepTheValueAtCoordinateZero) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const auto m2 = n == 4 ? Mesh({2, 2}) : Mesh({1, n});
  const std::vector<Spec> specs = {
      DSpec("sum", {3, 4}, DType::kFloat32, m1, "[P(sum)]"),
      DSpec("max", {3, 4}, DType::kInt32, m1, "[P(max)]"),
      DSpec("shard_sum", {4, 6}, DType::kFloat32, m2, "[S(0), P(sum)]"),
  };
  Map full;
  Map local;
  for (const Spec& s : specs) {
    if (Rank() == 0) full.Set(s.path, s.Full());
    local.Set(s.path, MetaLeaf(s));
  }
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  for (const Spec& s : specs) {
    SCOPED_TRACE(s.path);
    ASSERT_EQ(local.Find(s.path)->kind(), ValueKind::kDTensor);
    const DTensor& dt = local.Find(s.path)->as_dtensor();
    EXPECT_EQ(PlacementsToString(dt.placements()), PlacementsToString(s.placements));
    // The unreduced piece: this rank's piece with Partial read as Replicate.
    std::vector<Placement> replicated = s.placements;
    int partial_dim = 0;
    for (size_t d = 0; d < replicated.size(); ++d) {
      if (replicated[d].is_partial()) {
        replicated[d] = Placement::Replicate();
        partial_dim = static_cast<int>(d);
      }
    }
    const Tensor piece = (*DistributeTensor(s.Full(), s.mesh, replicated, Rank())).local();
    const bool at_zero = (*s.mesh->Coordinate(Rank()))[partial_dim] == 0;
    if (at_zero) {
      ExpectSameTensor(dt.local(), piece, "coordinate 0");
    } else if (s.placements[partial_dim].reduce_op() == ReduceOp::kSum) {
      ExpectSameTensor(dt.local(), *Tensor::Zeros(piece.shape(), piece.dtype()), "identity");
    }
  }
  if (!NoRankFailed()) return;
  absl::StatusOr<Map> gathered = GatherStateDict(local, WorldGather());
  ASSERT_TRUE(AllTrue(gathered.ok())) << gathered.status();
  for (const Spec& s : specs) ExpectTreeEq(*gathered->Find(s.path), s.Full(), s.path);
}

// case-015: the same key is bfloat16 on rank 0 and float32 elsewhere: found before any
// data moves, the same error on every rank naming the key and both dtypes, no hang. At
// N == 1, a local dtype that is not the checkpoint's.
TEST(BroadcastStateDictMpi, Case015DTypeDiffersBetweenRanks) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const DType mine = Rank() == 0 ? DType::kBFloat16 : DType::kFloat32;
  // Gather.
  {
    Map sd{{"case015", Map{{"w", *DTensor::Make(*Tensor::Zeros({1}, mine), m1,
                                                PlacementsOf("[S(0)]"), {n})}}}};
    absl::StatusOr<Map> got = GatherStateDict(sd, WorldGather());
    ExpectSameStatusOnEveryRank(got.status());
    if (n > 1) {
      ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("case015.w"));
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("bfloat16"));
      EXPECT_THAT(std::string(got.status().message()), HasSubstr("float32"));
    } else {
      EXPECT_TRUE(got.ok()) << got.status();
    }
  }
  if (!NoRankFailed()) return;
  // Broadcast: rank 0's checkpoint is bfloat16; each rank's local has its own dtype.
  {
    const Map full =
        Rank() == 0 ? Map{{"case015", Map{{"w", *Tensor::Zeros({1}, DType::kBFloat16)}}}} : Map{};
    const DType local_dtype = n == 1 ? DType::kFloat32 : mine;
    Map local{{"case015", Map{{"w", *DTensor::Make(*Tensor::Meta({1}, local_dtype), m1,
                                                   PlacementsOf("[R]"), {1})}}}};
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
    ExpectSameStatusOnEveryRank(result.status());
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("case015.w"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("bfloat16"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("float32"));
    // Nothing was written.
    const Value& w = At(local, "case015.w");
    EXPECT_TRUE(w.kind() == ValueKind::kDTensor && w.as_dtensor().local().is_meta())
        << DebugString(w);
  }
}

// case-016: ranks hold local shapes the placements forbid: global (40 N,) under [S(0)]
// needs (40,) everywhere, rank 1 (rank 0 at N == 1) holds (38,). The same error on every
// rank, naming the key and both shapes, before any collective moves data.
TEST(BroadcastStateDictMpi, Case016LocalShapesThePlacementsForbid) {
  const int n = WorldSize();
  const int bad = n == 1 ? 0 : 1;
  const auto m1 = Mesh({n});
  const int64_t local_len = Rank() == bad ? 38 : 40;
  const auto make_local = [&] {
    return Map{{"case016", Map{{"w", *DTensor::Make(ValuePattern({local_len}, DType::kFloat32, 3),
                                                    m1, PlacementsOf("[S(0)]"), {40 * n})}}}};
  };
  const auto check = [&](const absl::Status& status) {
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("case016.w"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("[40]"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("[38]"));
  };
  {
    absl::StatusOr<Map> got = GatherStateDict(make_local(), WorldGather());
    ExpectSameStatusOnEveryRank(got.status());
    check(got.status());
  }
  if (!NoRankFailed()) return;
  {
    const Map full = Rank() == 0
                         ? Map{{"case016", Map{{"w", ValuePattern({40 * n}, DType::kFloat32, 4)}}}}
                         : Map{};
    Map local = make_local();
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
    ExpectSameStatusOnEveryRank(result.status());
    check(result.status());
  }
}

// Ranks whose state dicts have different keys: the same error on every rank naming a
// differing path, for gather and for broadcast.
TEST(BroadcastStateDictMpi, MismatchedKeysBetweenRanksFailOnEveryRank) {
  const int n = WorldSize();
  if (n == 1) GTEST_SKIP() << "needs two ranks to disagree";
  const auto m1 = Mesh({n});
  const Spec s = DSpec("x", {4, 4}, DType::kFloat32, m1, "[S(0)]");
  const std::string key = Rank() == 0 ? "only_on_rank0" : "elsewhere";
  const auto check = [&](const absl::Status& status) {
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), ContainsRegex("a\\.(only_on_rank0|elsewhere)"));
  };
  {
    absl::StatusOr<Map> got =
        GatherStateDict(Map{{"a", Map{{key, ShardedLeaf(s)}}}}, WorldGather());
    ExpectSameStatusOnEveryRank(got.status());
    check(got.status());
  }
  if (!NoRankFailed()) return;
  {
    const Map full =
        Rank() == 0 ? Map{{"a", Map{{"only_on_rank0", s.Full()}, {"elsewhere", s.Full()}}}} : Map{};
    Map local{{"a", Map{{key, MetaLeaf(s)}}}};
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
    ExpectSameStatusOnEveryRank(result.status());
    check(result.status());
  }
}

// A local DTensor whose global shape or dtype is not the checkpoint's; a bad root and a
// bucket size of 0: the same InvalidArgument on every rank.
TEST(BroadcastStateDictMpi, LocalDisagreesWithCheckpointFailsOnEveryRank) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const Map full =
      Rank() == 0 ? Map{{"m", Map{{"w", ValuePattern({6, 4}, DType::kFloat32, 5)}}}} : Map{};
  {
    const Spec s = DSpec("m.w", {8, 4}, DType::kFloat32, m1, "[S(0)]");
    Map local{{"m", Map{{"w", MetaLeaf(s)}}}};
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
    ExpectSameStatusOnEveryRank(result.status());
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("m.w"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("[6, 4]"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("[8, 4]"));
  }
  if (!NoRankFailed()) return;
  {
    const Spec s = DSpec("m.w", {6, 4}, DType::kFloat64, m1, "[S(0)]");
    Map local{{"m", Map{{"w", ZeroLeaf(s)}}}};
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, WorldBroadcast());
    ExpectSameStatusOnEveryRank(result.status());
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("m.w"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("float32"));
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("float64"));
  }
  if (!NoRankFailed()) return;
  for (int option = 0; option < 3; ++option) {
    BroadcastOptions options = WorldBroadcast();
    if (option == 0) options.root = n;
    if (option == 1) options.root = -1;
    if (option == 2) options.bucket_bytes = 0;
    Map local{{"m", Map{{"w", None{}}}}};
    absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
    ExpectSameStatusOnEveryRank(result.status());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << "option " << option << ": " << result.status();
    const std::string want[] = {absl::StrCat("root ", n, " is not a rank of the communicator"),
                                "root -1 is not a rank of the communicator",
                                "bucket_bytes must be at least 1, got 0"};
    EXPECT_THAT(result.status().message(), HasSubstr(want[option]));
    if (!NoRankFailed()) return;
  }
}

// ---------------------------------------------------------------------------------------
// Distribute.

// case-011: every rank holds the full state dict and cuts its own pieces without any
// collective: 8x6 [StridedShard(0, 2), Shard(0)] (FSDP over TP) on 2x2 at N == 4 (1xN
// otherwise) plus the mixed state dict, comm == nullptr. The last rank arrives 500 ms
// late; the others must not wait for it.
TEST(DistributeStateDictMpi, Case011NoCollectiveRanksArriveAtDifferentTimes) {
  const int n = WorldSize();
  const auto mesh = n == 4 ? Mesh({2, 2}) : Mesh({1, n});
  const Spec s = DSpec("w", {8, 6}, DType::kFloat32, mesh, "[_S(0, 2), S(0)]");
  Map full = MixedStateDict(FullLeaf);
  Map local = MixedStateDict(MetaLeaf, /*placeholders=*/true);
  Map want = MixedStateDict(ExpectedFromMetaLeaf);
  for (Map* m : {&full, &local, &want}) {
    // The 0-dim DTensor has its own test (ZeroDimTensorReplacesZeroDimDTensor).
    m->Find("model")->as_map().Erase("scalar");
  }
  full.Set("w", s.Full());
  local.Set("w", MetaLeaf(s));
  want.Set("w", ShardedLeaf(s));
  if (!NoRankFailed()) return;
  if (n > 1 && Rank() == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  DistributeOptions options;
  options.rank = Rank();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = DistributeStateDict(full, local, options);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(AllTrue(status.ok())) << status;
  if (n > 1 && Rank() != n - 1) {
    EXPECT_LT(ms, 250.0) << "waited for the late rank?";
  }
  ExpectTreeEq(local, want, "");
  if (n == 4) {
    // PyTorch's FSDP2-over-TP rows: (dp 0, tp 0) 0-1, (0, 1) 4-5, (1, 0) 2-3, (1, 1) 6-7.
    const int64_t first_row[] = {0, 4, 2, 6};
    const Tensor rows = *s.Full().Narrow(0, first_row[Rank()], 2);
    ASSERT_EQ(At(local, "w").kind(), ValueKind::kDTensor);
    ExpectSameTensor(At(local, "w").as_dtensor().local(), rows, "case-011 rows");
  }
}

// A 0-dim checkpoint tensor whose local leaf is a 0-dim DTensor [R] (a scalar parameter of
// a sharded model) is written into local as the plain 0-dim tensor, as every 0-dim leaf
// is, with and without a communicator.
TEST(DistributeStateDictMpi, ZeroDimTensorReplacesZeroDimDTensor) {
  const Spec s = DSpec("model.scalar", {}, DType::kFloat32, Mesh({WorldSize()}), "[R]");
  const Map full{{"model", Map{{"scalar", s.Full()}}}};
  for (Communicator* comm :
       {static_cast<Communicator*>(nullptr), static_cast<Communicator*>(g_world)}) {
    SCOPED_TRACE(comm == nullptr ? "no comm" : "comm");
    Map local{{"model", Map{{"scalar", MetaLeaf(s)}}}};
    DistributeOptions options;
    options.comm = comm;
    options.rank = Rank();
    const absl::Status status = DistributeStateDict(full, local, options);
    ASSERT_TRUE(AllTrue(status.ok())) << status;
    ExpectTreeEq(local, full, "");
    if (!NoRankFailed()) return;
  }
}

// case-012: the full state dict only on rank 0 (what ranks_only gathers leave), with a
// communicator: every rank returns the same error, naming the key and the first rank
// lacking it, and suggesting the broadcast. Without a communicator each rank reports its
// own error and rank 0 succeeds.
TEST(DistributeStateDictMpi, Case012FullOnlyOnRankZeroFailsOnEveryRank) {
  const int n = WorldSize();
  const Spec s = DSpec("layer.w", {4 * n, 4}, DType::kFloat32, Mesh({n}), "[S(0)]");
  // At N == 1 rank 0 itself lacks the key.
  const bool has = n > 1 && Rank() == 0;
  const Map full = has ? Map{{"layer", Map{{"w", s.Full()}}}} : Map{};
  const int first_lacking = n > 1 ? 1 : 0;
  {
    Map local{{"layer", Map{{"w", MetaLeaf(s)}}}};
    DistributeOptions options;
    options.comm = g_world;
    const absl::Status status = DistributeStateDict(full, local, options);
    ExpectSameStatusOnEveryRank(status);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("layer.w"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("rank ", first_lacking)));
    EXPECT_THAT(std::string(status.message()), ContainsRegex("[Bb]roadcast"));
  }
  if (!NoRankFailed()) return;
  {
    Map local{{"layer", Map{{"w", MetaLeaf(s)}}}};
    DistributeOptions options;
    options.rank = Rank();
    const absl::Status status = DistributeStateDict(full, local, options);
    if (has) {
      EXPECT_TRUE(status.ok()) << status;
      ExpectTreeEq(local, Map{{"layer", Map{{"w", ShardedLeaf(s)}}}}, "");
    } else {
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
      EXPECT_THAT(std::string(status.message()), HasSubstr("layer.w"));
      EXPECT_THAT(std::string(status.message()), HasSubstr(absl::StrCat("rank ", Rank())));
    }
  }
}

// case-014: optimizer state stays a DTensor with the same mesh and placements; rank r's
// local holds rows 2r, 2r + 1. Non-tensor and 0-dim leaves the local lacks are added.
TEST(DistributeStateDictMpi, Case014OptimizerStateStaysDTensor) {
  const int n = WorldSize();
  const auto mesh = Mesh({n});
  const Spec s = DSpec("exp_avg", {2 * n, 4}, DType::kFloat32, mesh, "[S(0)]");
  const Tensor step = ValuePattern({}, DType::kFloat32, 9);
  const Map full{{"exp_avg", s.Full()}, {"step", step}, {"lr", 0.5}};
  for (Communicator* comm :
       {static_cast<Communicator*>(nullptr), static_cast<Communicator*>(g_world)}) {
    SCOPED_TRACE(comm == nullptr ? "no comm" : "comm");
    Map local{{"exp_avg", ZeroLeaf(s)}};
    const DTensor before = local.Find("exp_avg")->as_dtensor();
    DistributeOptions options;
    options.comm = comm;
    options.rank = Rank();
    const absl::Status status = DistributeStateDict(full, local, options);
    ASSERT_TRUE(AllTrue(status.ok())) << status;
    ASSERT_EQ(local.Find("exp_avg")->kind(), ValueKind::kDTensor);
    const DTensor& after = local.Find("exp_avg")->as_dtensor();
    EXPECT_EQ(*after.mesh(), *before.mesh());
    EXPECT_EQ(PlacementsToString(after.placements()), "[S(0)]");
    EXPECT_EQ(after.global_shape(), (IntVector{2 * n, 4}));
    ExpectSameTensor(after.local(), *s.Full().Narrow(0, 2 * Rank(), 2), "exp_avg");
    ExpectTreeEq(local, Map{{"exp_avg", ShardedLeaf(s)}, {"step", step}, {"lr", 0.5}}, "");
    if (!NoRankFailed()) return;
  }
}

// Partial placements: the rank at coordinate 0 of the Partial mesh dim keeps the value,
// the others get P(sum)'s identity (zeros); P(max) reduces back to the value.
TEST(DistributeStateDictMpi, PartialGivesTheValueAtCoordinateZero) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const auto m2 = n == 4 ? Mesh({2, 2}) : Mesh({n, 1});
  const std::vector<Spec> specs = {
      DSpec("sum", {3, 4}, DType::kFloat64, m1, "[P(sum)]"),
      DSpec("max", {3, 4}, DType::kInt64, m1, "[P(max)]"),
      DSpec("sum_shard", {5, 4}, DType::kFloat32, m2, "[P(sum), S(1)]"),
  };
  Map full;
  Map local;
  for (const Spec& s : specs) {
    full.Set(s.path, s.Full());
    local.Set(s.path, MetaLeaf(s));
  }
  DistributeOptions options;
  options.comm = g_world;
  const absl::Status status = DistributeStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(status.ok())) << status;
  for (const Spec& s : specs) {
    SCOPED_TRACE(s.path);
    const DTensor& dt = local.Find(s.path)->as_dtensor();
    std::vector<Placement> replicated = s.placements;
    for (Placement& p : replicated) {
      if (p.is_partial()) p = Placement::Replicate();
    }
    const Tensor piece = (*DistributeTensor(s.Full(), s.mesh, replicated, Rank())).local();
    if ((*s.mesh->Coordinate(Rank()))[0] == 0) {
      ExpectSameTensor(dt.local(), piece, "coordinate 0");
    } else if (s.placements[0].reduce_op() == ReduceOp::kSum) {
      ExpectSameTensor(dt.local(), *Tensor::Zeros(piece.shape(), piece.dtype()), "identity");
    }
  }
  if (!NoRankFailed()) return;
  absl::StatusOr<Map> gathered = GatherStateDict(local, WorldGather());
  ASSERT_TRUE(AllTrue(gathered.ok())) << gathered.status();
  ExpectTreeEq(*gathered, full, "");
}

// A local DTensor whose global shape or dtype is not the checkpoint's: with a
// communicator, the same error on every rank, naming the key and both values.
TEST(DistributeStateDictMpi, LocalDisagreesWithCheckpointFailsOnEveryRank) {
  const int n = WorldSize();
  const auto m1 = Mesh({n});
  const Map full{{"m", Map{{"w", ValuePattern({6, 4}, DType::kFloat32, 5)}}}};
  const Spec shape = DSpec("m.w", {8, 4}, DType::kFloat32, m1, "[S(0)]");
  const Spec dtype = DSpec("m.w", {6, 4}, DType::kInt32, m1, "[S(0)]");
  for (const Spec* s : {&shape, &dtype}) {
    Map local{{"m", Map{{"w", MetaLeaf(*s)}}}};
    DistributeOptions options;
    options.comm = g_world;
    const absl::Status status = DistributeStateDict(full, local, options);
    ExpectSameStatusOnEveryRank(status);
    ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("m.w"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(s == &shape ? "[6, 4]" : "float32"));
    EXPECT_THAT(std::string(status.message()), HasSubstr(s == &shape ? "[8, 4]" : "int32"));
    if (!NoRankFailed()) return;
  }
}

// Options that shape the collectives differ between ranks (a review found a hang, wrong
// values and an MPI abort here): the same InvalidArgument on every rank, before any data
// moves. One rank passing an invalid bucket size is the same case.
TEST(DistributedStateDictMpi, OptionsThatDifferBetweenRanksAreAnErrorOnEveryRank) {
  const int n = WorldSize();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const auto m1 = Mesh({n});
  const Tensor full = ValuePattern({6, 4}, DType::kFloat32, 1);
  Map sd{{"w", *DistributeTensor(full, m1, PlacementsOf("[S(0)]"), Rank())}};
  for (int64_t other : {int64_t{0}, int64_t{1}}) {
    GatherOptions gather = WorldGather();
    gather.bucket_bytes = Rank() == 1 ? other : 1024;
    absl::StatusOr<Map> got = GatherStateDict(sd, gather);
    ExpectSameStatusOnEveryRank(got.status());
    ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("bucket_bytes"));

    Map local{{"w", *DTensor::Make(*Tensor::Meta({0, 0}, DType::kFloat32), m1,
                                   PlacementsOf("[S(0)]"), {6, 4})}};
    BroadcastOptions broadcast = WorldBroadcast();
    broadcast.bucket_bytes = Rank() == 1 ? other : 1024;
    absl::StatusOr<BroadcastResult> result =
        BroadcastStateDict(Rank() == 0 ? Map{{"w", full}} : Map{}, local, broadcast);
    ExpectSameStatusOnEveryRank(result.status());
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(std::string(result.status().message()), HasSubstr("bucket_bytes"));
  }
  Map local{{"w", *DTensor::Make(*Tensor::Meta({0, 0}, DType::kFloat32), m1, PlacementsOf("[S(0)]"),
                                 {6, 4})}};
  BroadcastOptions broadcast = WorldBroadcast();
  broadcast.root = Rank() == 1 ? 1 : 0;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(Map{{"w", full}}, local, broadcast);
  ExpectSameStatusOnEveryRank(result.status());
  ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("root 1"));
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
