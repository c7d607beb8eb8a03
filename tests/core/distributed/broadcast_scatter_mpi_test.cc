// BroadcastStateDict over MPI when every rank keeps only its own pieces: the transfer engine
// (core/distributed/internal/engine/transfer.h) has the root send each rank its pieces alone,
// large Shard(0) pieces straight into place, the rest packed, point to point; a tensor every
// rank keeps whole (Replicate) is one broadcast. Meta locals (fresh) and allocated locals
// (written in place, one of them strided), Shard(0) and Shard(1), uneven and empty pieces,
// a 2-D mesh, tensors larger than the bucket cut across exchanges; every element compared
// with DistributeTensor's piece. The bytes the root sends are exactly the other ranks'
// shares, plus a replicated tensor's bytes once per other rank. CTest runs this binary under
// `mpiexec -n N` for N = 1 to 4.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/sharding/sharding.h"
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

void BroadcastAndCheck(int64_t bucket_bytes, Extra extra) {
  const std::vector<Spec> specs = Specs(extra);
  const int n = WorldSize();
  Map full;
  Map local;
  Map want;
  int64_t root_sends = 0;  // every other rank's share of each tensor
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    if (Rank() == 0) full.Set(s.path, s.Full());
    local.Set(s.path, Local(s, i));
    want.Set(s.path, ExpectedPieceLeaf(s));
    const int64_t bytes = s.Full().nbytes();
    const IntVector own = *ComputeLocalShape(s.shape, *s.mesh, s.placements, 0);
    int64_t own_bytes = bytes / std::max<int64_t>(1, s.Full().numel());  // an element's
    for (int64_t extent : own) own_bytes *= extent;
    const bool replicated = s.placements.size() == 1 && s.placements[0].is_replicate();
    root_sends += replicated ? bytes * (n - 1) : bytes - own_bytes;
  }
  BroadcastOptions options;
  options.comm = g_world;
  options.bucket_bytes = bucket_bytes;
  TransferStats stats;
  options.stats = &stats;
  absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  ASSERT_TRUE(AllTrue(result.ok())) << result.status();
  ExpectTreeEq(local, want, "");
  if (n == 1) return;
  // Two agreements, the exchanges, the closing.
  EXPECT_EQ(stats.collectives, 3 + stats.exchanges);
  if (Rank() != 0) {
    EXPECT_EQ(stats.sent_bytes, 0);
    return;
  }
  EXPECT_EQ(stats.sent_bytes, root_sends);
  EXPECT_GT(stats.sent_bytes, 0);
}

TEST(BroadcastScatterMpi, LargePiecesAreScattered) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kNone);
}

// Exchanges of at most 300 KiB per rank cut the tensors.
TEST(BroadcastScatterMpi, BucketsSmallerThanTensors) { BroadcastAndCheck(300 << 10, Extra::kNone); }

TEST(BroadcastScatterMpi, ManySmallTensorsAreScatteredInFewMessages) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kManySmall);
}

TEST(BroadcastScatterMpi, AReplicatedTensorIsBroadcastWhole) {
  BroadcastAndCheck(int64_t{256} << 20, Extra::kReplicate);
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
