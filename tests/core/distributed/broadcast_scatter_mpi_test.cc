// BroadcastStateDict over MPI when every rank keeps only its own pieces (core/distributed/
// internal/broadcast_scatter.h): the root sends each rank its pieces alone, large Shard(0)
// pieces straight into place, the rest packed. Meta locals (fresh) and allocated locals
// (written in place, one of them strided), Shard(0) and Shard(1), uneven and empty pieces,
// a 2-D mesh, tensors larger than the bucket cut across buckets; every element compared
// with DistributeTensor's piece. The bytes the root sends are only the other ranks' shares:
// fewer than the whole state dict, which a broadcast sends. A bucket holding a Replicate
// tensor, or mostly small tensors, is broadcast whole instead, and gives the same pieces.
// CTest runs this binary under `mpiexec -n N` for N = 1 to 4.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

enum class Extra { kNone, kReplicate, kManySmall };

std::vector<Spec> Specs(Extra extra) {
  const int n = WorldSize();
  const auto line = Mesh({n});
  std::vector<Spec> specs = {
      DSpec("big_rows", {2000, 100}, DType::kFloat32, line, "[S(0)]"),
      DSpec("big_cols", {400, 600}, DType::kBFloat16, line, "[S(1)]"),
      DSpec("uneven", {7 * n + 3, 5}, DType::kInt64, line, "[S(0)]"),
      DSpec("tiny", {2}, DType::kFloat32, line, "[S(0)]"),
  };
  if (n % 2 == 0) {
    specs.push_back(DSpec("mesh2d", {512, 256}, DType::kFloat32, Mesh({2, n / 2}), "[S(0), S(1)]"));
  }
  if (extra == Extra::kReplicate) specs.push_back(DSpec("norm", {64}, DType::kFloat32, line, "[R]"));
  if (extra == Extra::kManySmall) {
    for (int i = 0; i < 30; ++i) {
      specs.push_back(DSpec(absl::StrCat("small.", i), {16 + i, 3}, DType::kFloat16, line, "[S(0)]"));
    }
  }
  return specs;
}

// The local leaf `index`: meta (a fresh local) for even indices, else allocated zeros to
// be written in place, a strided one for index 1.
Value Local(const Spec& s, size_t index) {
  if (index % 2 == 0) return MetaLeaf(s);
  if (index != 1 || s.LocalShape().size() != 2) return ZeroLeaf(s);
  const IntVector shape = s.LocalShape();
  const Tensor backing = *Tensor::Zeros({shape[1], shape[0]}, s.dtype);
  const Tensor view =
      *Tensor::FromStorage(backing.storage(), s.dtype, {shape[0], shape[1]}, {1, shape[0]});
  return *DTensor::Make(view, s.mesh, s.placements, s.shape);
}

enum class Expect { kScatter, kBroadcast, kEither };

void BroadcastAndCheck(int64_t bucket_bytes, Extra extra, Expect expect) {
  const std::vector<Spec> specs = Specs(extra);
  Map full;
  Map local;
  Map want;
  int64_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    if (Rank() == 0) full.Set(s.path, s.Full());
    local.Set(s.path, Local(s, i));
    want.Set(s.path, ExpectedPieceLeaf(s));
    total += s.Full().nbytes();
  }
  BroadcastOptions options;
  options.comm = g_world;
  options.bucket_bytes = bucket_bytes;
  CollectiveStats stats;
  options.stats = &stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ExpectTreeEq(local, want, "");
  if (WorldSize() == 1) return;
  EXPECT_EQ(stats.data_collectives, stats.buckets);
  if (Rank() != 0) return;  // the bytes the root sent
  if (expect == Expect::kBroadcast) {
    EXPECT_GE(stats.bytes, total);  // everything, broadcast to everyone
  } else if (expect == Expect::kScatter) {
    EXPECT_LT(stats.bytes, total);  // the other ranks' shares only
    EXPECT_GT(stats.bytes, 0);
  }
}

TEST(BroadcastScatterMpi, LargePiecesAreScattered) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kNone, Expect::kScatter);
}

// Buckets cut the tensors; a bucket of large pieces is scattered, one of small pieces (a
// tensor's tail) broadcast.
TEST(BroadcastScatterMpi, BucketsSmallerThanTensors) {
  BroadcastAndCheck(300 << 10, Extra::kNone, Expect::kEither);
}

TEST(BroadcastScatterMpi, ABucketOfManySmallTensorsIsBroadcastWhole) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kManySmall, Expect::kBroadcast);
}

TEST(BroadcastScatterMpi, AReplicatedTensorIsBroadcastWhole) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kReplicate, Expect::kBroadcast);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
