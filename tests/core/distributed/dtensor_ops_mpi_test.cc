// Multi-rank tests of core/distributed/dtensor_ops.h and comm/device_mesh_comm.h over MPI. CTest
// runs this binary under `mpiexec -n N` for N = 1, 2, 3, 4; every rank runs every test. Every rank
// builds the same full tensor, whose element i holds bytes derived from i, so each rank checks its
// own piece and its own gathered result. Cases of docs/CASES.md (gather) are named in the
// test names. Rank 0 prints GoogleTest's usual output; other ranks print only their failures.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/mpi_test_main.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

MpiCommunicator* g_world = nullptr;

// A contiguous tensor of `shape` whose element i holds i (test::Arange: exact for the
// number types while i < 256, wrapping for uint8 and int8, bool i % 2, float8 the finite
// byte i % 127).
Tensor Pattern(IntSpan shape, DType dtype) { return test::Arange(shape, dtype); }

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.is_contiguous() &&
         b.is_contiguous() &&
         (a.nbytes() == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0);
}

// Checks, element by element, that `local` is full[I_0 x I_1 x ...] for this rank's owned
// index lists (docs/SEMANTICS.md 1.5's outer-product property).
void ExpectLocalPiece(const Tensor& local, const Tensor& full, const DeviceMesh& mesh,
                      const std::vector<Placement>& placements) {
  const LocalShardInfo info =
      *ComputeLocalShapeAndGlobalOffset(full.shape(), mesh, placements, g_world->rank());
  ASSERT_EQ(local.shape(), info.local_shape);
  ASSERT_TRUE(local.is_contiguous());
  const IntVector full_strides = ContiguousStrides(full.shape());
  const int64_t elem = (ElementBits(full.dtype()) / 8);
  IntVector index(local.shape().size(), 0);
  for (int64_t i = 0; i < local.numel(); ++i) {
    int64_t at = 0;
    for (int d = 0; d < local.dim(); ++d) at += OwnedIndices(info, d)[index[d]] * full_strides[d];
    ASSERT_EQ(std::memcmp(static_cast<const char*>(local.data_ptr()) + i * elem,
                          static_cast<const char*>(full.data_ptr()) + at * elem, elem),
              0)
        << "local element " << i;
    for (int d = local.dim() - 1; d >= 0; --d) {
      if (++index[d] < local.size(d)) break;
      index[d] = 0;
    }
  }
}

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

// Distributes Pattern(shape, dtype), checks this rank's piece, gathers it back with
// FullTensor and checks the result is the source, bit for bit.
void RoundTrip(DeviceMeshComm& mesh_comm, IntSpan shape, DType dtype, const char* placements) {
  SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape), " ", placements, " on ",
                            mesh_comm.mesh()->ToString()));
  const std::vector<Placement> p = *ParsePlacements(placements);
  const Tensor full = Pattern(shape, dtype);
  absl::StatusOr<DTensor> dt = DistributeTensor(full, mesh_comm.mesh(), p, g_world->rank());
  ASSERT_TRUE(dt.ok()) << dt.status();
  bool partial = false;
  for (const Placement& q : p) partial = partial || q.is_partial();
  if (!partial) ExpectLocalPiece(dt->local(), full, *mesh_comm.mesh(), p);
  absl::StatusOr<Tensor> gathered = FullTensor(*dt, mesh_comm);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_TRUE(SameBytes(*gathered, full)) << gathered->ToString();
}

TEST(DeviceMeshComm, DimCommsFollowCoordinates) {
  const int n = g_world->size();
  const int64_t rows = n == 4 ? 2 : 1;
  auto mesh = Mesh({rows, n / rows});
  absl::StatusOr<DeviceMeshComm> mc = DeviceMeshComm::Create(mesh, *g_world);
  ASSERT_TRUE(mc.ok()) << mc.status();
  for (int d = 0; d < 2; ++d) {
    absl::StatusOr<Communicator*> c = mc->DimComm(d);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->size(), mesh->size(d));
    EXPECT_EQ((*c)->rank(), mc->coordinate()[d]);
    EXPECT_EQ(*mc->DimComm(d), *c);  // cached
  }
  const absl::Status dim = mc->DimComm(2).status();
  EXPECT_EQ(dim.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dim.message(), HasSubstr("mesh dim 2 out of range for DeviceMesh"));
  absl::StatusOr<DeviceMeshComm> wrong = DeviceMeshComm::Create(Mesh({n + 1}), *g_world);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(),
              HasSubstr(absl::StrCat("has ", n + 1, " ranks but the communicator has ", n)));
}

// case-001 (5x10 Shard(0) over 4 ranks: rows 2,2,1,0) and case-005 (3x9 Shard(1) over 2
// ranks) at every rank count, for every dtype.
TEST(DTensorOpsMpi, OneDimShardRoundTripsEveryDType) {
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({g_world->size()}), *g_world);
  for (DType dtype : test::kWholeByteDTypes) {
    RoundTrip(mc, {5, 10}, dtype, "[S(0)]");
    RoundTrip(mc, {3, 9}, dtype, "[S(1)]");
  }
}

TEST(DTensorOpsMpi, OneDimShapesUnevenAndEmpty) {
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({g_world->size()}), *g_world);
  RoundTrip(mc, {3, 9}, DType::kFloat32, "[S(0)]");  // 3 rows: empty shards at n = 4
  RoundTrip(mc, {0, 4}, DType::kFloat32, "[S(0)]");  // no rows at all
  RoundTrip(mc, {2, 3, 4}, DType::kInt32, "[S(2)]");
  RoundTrip(mc, {7}, DType::kInt64, "[S(0)]");
  RoundTrip(mc, {9}, DType::kInt64, "[_S(0, 2)]");
  RoundTrip(mc, {4, 6}, DType::kFloat32, "[_S(1, 3)]");
  RoundTrip(mc, {}, DType::kFloat64, "[R]");
  RoundTrip(mc, {5, 10}, DType::kFloat32, "[R]");
}

TEST(DTensorOpsMpi, Case001UnevenShard0KeepsNoPaddingRows) {
  const int n = g_world->size();
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({n}), *g_world);
  const Tensor full = Pattern({5, 10}, DType::kFloat32);
  DTensor dt = *DistributeTensor(full, mc.mesh(), {Placement::Shard(0)}, g_world->rank());
  if (n == 4) {
    const int64_t rows[] = {2, 2, 1, 0};
    EXPECT_EQ(dt.local().shape(), (IntVector{rows[g_world->rank()], 10}));
  }
  absl::StatusOr<Tensor> gathered = FullTensor(dt, mc);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(gathered->shape(), (IntVector{5, 10}));
  EXPECT_TRUE(SameBytes(*gathered, full));
}

TEST(DTensorOpsMpi, Case005ShortShardOfShard1HasItsOwnStrides) {
  if (g_world->size() != 2) GTEST_SKIP() << "case-005 is over 2 ranks";
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({2}), *g_world);
  const Tensor full = Pattern({3, 9}, DType::kFloat32);
  DTensor dt = *DistributeTensor(full, mc.mesh(), {Placement::Shard(1)}, g_world->rank());
  const int64_t width = g_world->rank() == 0 ? 5 : 4;
  EXPECT_EQ(dt.local().shape(), (IntVector{3, width}));
  EXPECT_EQ(dt.local().strides(), (IntVector{width, 1}));
  EXPECT_TRUE(SameBytes(*FullTensor(dt, mc), full));
}

TEST(DTensorOpsMpi, Case006UnevenStridedShard) {
  if (g_world->size() != 2) GTEST_SKIP() << "case-006 is over 2 ranks";
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({2}), *g_world);
  const Tensor full = Pattern({5}, DType::kFloat32);
  DTensor dt = *DistributeTensor(full, mc.mesh(), {Placement::StridedShard(0, 2)}, g_world->rank());
  const std::vector<float> expected =
      g_world->rank() == 0 ? std::vector<float>{0, 1, 3} : std::vector<float>{2, 4};
  ASSERT_EQ(dt.local().numel(), static_cast<int64_t>(expected.size()));
  EXPECT_EQ(
      std::vector<float>(dt.local().data<float>(), dt.local().data<float>() + dt.local().numel()),
      expected);
  EXPECT_TRUE(SameBytes(*FullTensor(dt, mc), full));
}

TEST(DTensorOpsMpi, PartialRoundTrips) {
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({g_world->size()}), *g_world);
  RoundTrip(mc, {3, 4}, DType::kFloat32, "[P(sum)]");
  RoundTrip(mc, {3, 4}, DType::kInt64, "[P(max)]");
  RoundTrip(mc, {3, 4}, DType::kFloat32, "[P(min)]");
  RoundTrip(mc, {3, 4}, DType::kInt32, "[P(product)]");
  RoundTrip(mc, {3, 4}, DType::kInt64, "[P(avg)]");
}

// Partial values made independently of DistributeTensor: rank r holds r + 1 everywhere.
TEST(DTensorOpsMpi, PartialReducesOverTheMesh) {
  const int n = g_world->size();
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({n}), *g_world);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    Tensor local = *Tensor::Empty({2, 3}, DType::kFloat32);
    for (int64_t i = 0; i < 6; ++i)
      local.data<float>()[i] = static_cast<float>(g_world->rank() + 1);
    DTensor dt = *DTensor::Make(local, mc.mesh(), {Placement::Partial(op)}, {2, 3});
    absl::StatusOr<Tensor> full = FullTensor(dt, mc);
    ASSERT_TRUE(full.ok()) << full.status();
    const float want = op == ReduceOp::kSum ? static_cast<float>(n * (n + 1) / 2) : n;
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(full->data<float>()[i], want);
    EXPECT_EQ(local.data<float>()[0],
              static_cast<float>(g_world->rank() + 1));  // not reduced in place
  }
}

TEST(DTensorOpsMpi, TwoDimMeshRoundTrips) {
  const int n = g_world->size();
  {
    // Size-1 mesh dims at every rank count.
    DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1, n}), *g_world);
    RoundTrip(mc, {5, 3}, DType::kFloat32, "[S(0), S(1)]");
    RoundTrip(mc, {5, 4}, DType::kFloat32, "[P(sum), S(0)]");
  }
  if (n != 4) return;
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({2, 2}), *g_world);
  RoundTrip(mc, {5, 3}, DType::kFloat32, "[S(0), S(1)]");
  RoundTrip(mc, {5, 4}, DType::kInt64, "[R, S(0)]");
  RoundTrip(mc, {8}, DType::kFloat32, "[_S(0, 2), S(0)]");
  RoundTrip(mc, {15, 5}, DType::kBFloat16, "[_S(0, 2), S(0)]");
  RoundTrip(mc, {5, 4}, DType::kFloat32, "[S(0), S(0)]");
  RoundTrip(mc, {3, 4}, DType::kFloat32, "[S(0), S(0)]");  // (1, 1) is empty
  RoundTrip(mc, {18, 2}, DType::kInt32, "[S(0), _S(0, 2)]");
  RoundTrip(mc, {5, 4}, DType::kFloat32, "[P(sum), S(1)]");
  RoundTrip(mc, {5, 4}, DType::kInt64, "[S(1), P(max)]");
  RoundTrip(mc, {3, 2}, DType::kInt64, "[P(sum), P(product)]");
}

TEST(DTensorOpsMpi, FromLocalInfersTheGlobalShapeFromAllRanks) {
  const int n = g_world->size();
  auto mesh = Mesh({n});
  // 10 rows over 4 ranks are 3, 3, 3, 1: the global shape is 10 rows, not 4 * 3.
  const ChunkPiece piece = ShardPiece(10, n, g_world->rank());
  Tensor local = Pattern({piece.size, 3}, DType::kFloat32);
  absl::StatusOr<DTensor> dt = FromLocal(local, mesh, {Placement::Shard(0)}, *g_world);
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_EQ(dt->global_shape(), (IntVector{10, 3}));
  EXPECT_EQ(dt->local().data_ptr(), local.data_ptr());
  dt = FromLocal(local, mesh, {Placement::Shard(0)}, *g_world, IntVector{10, 3});
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_EQ(dt->global_shape(), (IntVector{10, 3}));
}

// case-004: rank r holds (2, 2 + r) under [Shard(1)]; not the chunk layout, so every rank
// gets an error naming the offending ranks and their shapes.
TEST(DTensorOpsMpi, Case004FromLocalRejectsNonChunkLayoutOnEveryRank) {
  const int n = g_world->size();
  if (n == 1) GTEST_SKIP() << "one rank always holds the chunk layout";
  auto mesh = Mesh({n});
  Tensor local = Pattern({2, 2 + g_world->rank()}, DType::kFloat32);
  const int64_t width = n * 2 + n * (n - 1) / 2;  // 14 at n = 4
  for (const std::optional<IntVector>& global :
       {std::optional<IntVector>(), std::optional<IntVector>(IntVector{2, width})}) {
    absl::StatusOr<DTensor> dt =
        FromLocal(local, mesh, {Placement::Shard(1)}, *g_world, global, "layer.weight");
    ASSERT_EQ(dt.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(dt.status().message(), HasSubstr("'layer.weight': rank 0"));
    EXPECT_THAT(dt.status().message(), HasSubstr("holds local shape [2, 2]"));
    EXPECT_THAT(dt.status().message(),
                HasSubstr(absl::StrCat("needs local shape [2, ", ChunkSize(width, n), "]")));
  }
  // Ranks passing tensors of different rank.
  Tensor odd =
      g_world->rank() == 0 ? Pattern({4}, DType::kFloat32) : Pattern({4, 1}, DType::kFloat32);
  absl::StatusOr<DTensor> dt = FromLocal(odd, mesh, {Placement::Shard(0)}, *g_world);
  ASSERT_EQ(dt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dt.status().message(), HasSubstr("local tensor of rank"));
}

// One ShardedTensor over the ranks: shard i (offsets[i], sizes[i] along dim 0 of a 1-D
// tensor of `length`) lives on rank owner(i) and holds the float values of its global
// indices, as Pattern.
ShardedTensor OneDimSharded(int64_t length, const std::vector<int64_t>& offsets,
                            const std::vector<int64_t>& sizes, int (*owner)(int, int)) {
  std::vector<ShardMetadata> metadata;
  std::vector<LocalShard> local;
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int r = owner(static_cast<int>(i), g_world->size());
    ShardMetadata m{{offsets[i]}, {sizes[i]}, RemoteDevice{r, Device::CPU()}};
    metadata.push_back(m);
    if (r == g_world->rank()) {
      Tensor t = *Tensor::Empty({sizes[i]}, DType::kFloat32);
      for (int64_t j = 0; j < sizes[i]; ++j)
        t.data<float>()[j] = static_cast<float>(offsets[i] + j);
      // Local shards listed last-first: placement follows metadata, not list order.
      local.insert(local.begin(), LocalShard{t, m});
    }
  }
  return *ShardedTensor::Make({length}, DType::kFloat32, metadata, local);
}

// case-002: sizes 3,0,2,0,1,0,0,2 at offsets 0,3,3,5,5,6,6,6, on 8 ranks in PyTorch's
// report; here shard i lives on rank i % N (several per rank), then on rank
// i % (N - 1) so that the last rank holds none.
TEST(DTensorOpsMpi, Case002ShardedGatherPlacesByOffsets) {
  const std::vector<int64_t> offsets = {0, 3, 3, 5, 5, 6, 6, 6};
  const std::vector<int64_t> sizes = {3, 0, 2, 0, 1, 0, 0, 2};
  const Tensor want = Pattern({8}, DType::kFloat32);
  for (auto owner : {+[](int i, int n) { return i % n; },
                     +[](int i, int n) { return n == 1 ? 0 : (n - 2 - i % (n - 1)); }}) {
    absl::StatusOr<Tensor> full =
        GatherShardedTensor(OneDimSharded(8, offsets, sizes, owner), *g_world);
    ASSERT_TRUE(full.ok()) << full.status();
    EXPECT_TRUE(SameBytes(*full, want));
  }
  // Dim 0 of size 0: an empty result of the same shape.
  absl::StatusOr<Tensor> empty = GatherShardedTensor(OneDimSharded(
                                                         0, {0}, {0}, +[](int, int) { return 0; }),
                                                     *g_world);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape(), (IntVector{0}));
}

// case-003: every rank contributes a (1, 0, 2) shard; the result is (N, 0, 2).
TEST(DTensorOpsMpi, Case003ZeroElementShardsGather) {
  const int n = g_world->size();
  std::vector<ShardMetadata> metadata;
  for (int r = 0; r < n; ++r) metadata.push_back({{r, 0, 0}, {1, 0, 2}, {r, Device::CPU()}});
  const LocalShard mine{*Tensor::Empty({1, 0, 2}, DType::kInt64), metadata[g_world->rank()]};
  ShardedTensor st = *ShardedTensor::Make({n, 0, 2}, DType::kInt64, metadata, {mine});
  absl::StatusOr<Tensor> full = GatherShardedTensor(st, *g_world);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->shape(), (IntVector{n, 0, 2}));
}

// FSDP1's chunk layout of a 2-D tensor: row chunks, one per rank, some empty.
TEST(DTensorOpsMpi, ShardedGatherChunkLayout2D) {
  const int n = g_world->size();
  const Tensor want = Pattern({5, 3}, DType::kFloat64);
  std::vector<ShardMetadata> metadata;
  std::vector<LocalShard> local;
  for (int r = 0; r < n; ++r) {
    const ChunkPiece piece = ShardPiece(5, n, r);
    metadata.push_back({{piece.offset, 0}, {piece.size, 3}, {r, Device::CPU()}});
    if (r == g_world->rank()) {
      local.push_back({*want.Narrow(0, piece.offset, piece.size), metadata.back()});
    }
  }
  absl::StatusOr<Tensor> full =
      GatherShardedTensor(*ShardedTensor::Make({5, 3}, DType::kFloat64, metadata, local), *g_world);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(SameBytes(*full, want));
}

TEST(DTensorOpsMpi, ShardedGatherErrorsOnEveryRank) {
  // A shard running past the end of the tensor.
  absl::StatusOr<Tensor> full =
      GatherShardedTensor(OneDimSharded(
                              8, {7}, {2}, +[](int, int n) { return n - 1; }),
                          *g_world);
  ASSERT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("does not fit in [8]"));
  if (g_world->size() == 1) return;
  // Ranks disagreeing on the global shape.
  const int64_t length = g_world->rank() == 0 ? 8 : 9;
  full = GatherShardedTensor(*ShardedTensor::Make({length}, DType::kFloat32, {}, {}), *g_world);
  ASSERT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("float32[8]"));
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
