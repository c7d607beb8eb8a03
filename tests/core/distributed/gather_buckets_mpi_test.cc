// GatherStateDict's buckets end to end (core/distributed/distributed_state_dict.h,
// GatherOptions::bucket_bytes): consecutive tensors share an all-gather while the bytes
// gathered stay within the bound, a tensor larger than the bound goes alone, and the
// results are the full tensors. The counts are computed here from the sizes alone.
// CTest runs this binary under `mpiexec -n N` for N = 1 to 4.
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

// 23 float32 [4n, 4] tensors, Shard(0) over the n ranks: every rank sends 64 bytes of each,
// 64n gathered per tensor; after the 11th, one [64n, 4] tensor (1 KiB per rank). With a
// bound of 5 small tensors (plus 32 bytes), the buckets are 5, 5, 1 (the 11th), the big one
// alone, then 5, 5, 2: 7 buckets, never more than the bound except the big one.
TEST(GatherBucketsMpi, BucketsHoldWhatFitsAndABigTensorGoesAlone) {
  const int n = WorldSize();
  const auto mesh = Mesh({n});
  Map sharded;
  Map want;
  int64_t total = 0;
  for (int i = 0; i < 24; ++i) {
    const bool big = i == 11;
    const Spec s =
        DSpec(absl::StrCat("t", i), {(big ? 64 : 4) * n, 4}, DType::kFloat32, mesh, "[S(0)]");
    sharded.Set(s.path, ShardedLeaf(s));
    want.Set(s.path, s.Full());
    total += (big ? 1024 : 64) * n;
  }
  GatherOptions options;
  options.comm = g_world;
  options.bucket_bytes = 5 * 64 * n + 32;
  CollectiveStats stats;
  options.stats = &stats;
  absl::StatusOr<Map> got = GatherStateDict(sharded, options);
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  ExpectTreeEq(*got, want, "");
  // On one rank nothing is sharded, so nothing moves.
  EXPECT_EQ(stats.buckets, n == 1 ? 0 : 7);
  EXPECT_EQ(stats.data_collectives, stats.buckets);
  EXPECT_EQ(stats.bytes, n == 1 ? 0 : total);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
