// GatherStateDict's exchanges end to end (core/distributed/distributed_state_dict.h,
// GatherOptions::bucket_bytes): the transfer engine moves many tensors in few exchanges,
// each within the bound per rank, and the results are the full tensors. Part of
// gather_mpi_test (CTest runs it under `mpiexec -n N` for N = 1 to 4).
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"

namespace sdrt::test {
namespace {

// 23 float32 [4n, 4] tensors, Shard(0) over the n ranks: every rank sends 64 bytes of each
// to every other rank; after the 11th, one [64n, 4] tensor (1 KiB per rank). With a bound of
// five small tensors' worth (plus 32 bytes) per rank and exchange, the transfer engine moves
// them in as many exchanges as the bound needs, never more than a bucket each way per rank
// (the big tensor's rows cut to fit), and the results are the full tensors.
TEST(GatherExchangesMpi, ExchangesHoldWhatFitsAndTheBigTensorIsCutToFit) {
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
  const int64_t bucket = 5 * 64 * n + 32;
  options.bucket_bytes = bucket;
  TransferStats stats;
  options.stats = &stats;
  absl::StatusOr<Map> got = GatherStateDict(sharded, options);
  ASSERT_TRUE(AllTrue(got.ok())) << got.status();
  ExpectTreeEq(*got, want, "");
  if (n == 1) {  // nothing is sharded, so nothing moves: the agreement alone
    EXPECT_EQ(stats.exchanges, 0);
    EXPECT_EQ(stats.collectives, 1);
    return;
  }
  // Every rank sends its pieces to the n - 1 others and receives theirs.
  EXPECT_EQ(stats.sent_bytes, total / n * (n - 1));
  EXPECT_EQ(stats.received_bytes, total / n * (n - 1));
  EXPECT_EQ(stats.wire_bytes, total * (n - 1));
  EXPECT_LE(stats.buffer_bytes, 3 * bucket);
  EXPECT_GE(stats.exchanges, (stats.sent_bytes + bucket - 1) / bucket);
  // The agreement, the exchanges and the closing: collectives follow the bound, not the
  // 24 tensors.
  EXPECT_LE(stats.exchanges, 2 * (stats.sent_bytes + bucket - 1) / bucket + 1);
  EXPECT_EQ(stats.collectives, 2 + stats.exchanges);
}

}  // namespace
}  // namespace sdrt::test
