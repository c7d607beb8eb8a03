// GPU tests of core/distributed/dtensor_ops.h and tensor/sharding/distribute.h (label gpu; each
// test skips without a CUDA device): CUDA tensors through a single-rank NcclCommunicator made
// without MPI, and CPU tensors staged through it (case-013).
//
// One rank cannot run the gather of FullTensor (every mesh has one rank, so nothing is
// sharded and the local comes back aliased); the device paths it shares are covered here
// through DistributeTensor (the region copies into a local piece and the Partial fills, for
// every rank of multi-rank meshes, as it needs no communication) and GatherShardedTensor
// (AllGatherBytes, AllGatherV and the region copies into the full tensor). Every CUDA result
// is compared byte for byte with the CPU path on the same input.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/nccl_single_rank.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

using test::kWholeByteDTypes;

const Device kGpu = Device::CUDA(0);

// A contiguous CPU tensor of `shape` whose every element is a finite value
// (test::FiniteBytes).
Tensor Pattern(IntSpan shape, DType dtype, int seed = 0) {
  return test::FiniteBytes(shape, dtype, seed);
}

// The bytes of `t` (any device, any strides) in row-major order.
std::string Bytes(const Tensor& t) {
  const Tensor cpu = *t.To(Device::CPU());
  const Tensor packed = *cpu.Contiguous();
  return std::string(static_cast<const char*>(packed.data_ptr()), packed.nbytes());
}

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

// DistributeTensor of a CUDA full tensor, for every rank of `mesh_shape`, gives the CPU
// path's local piece, on the GPU.
void ExpectSamePiecesAsCpu(IntSpan shape, DType dtype, IntSpan mesh_shape, const char* placements) {
  SCOPED_TRACE(absl::StrCat(DTypeName(dtype), ShapeToString(shape), " ", placements, " on ",
                            ShapeToString(mesh_shape)));
  const std::vector<Placement> p = *ParsePlacements(placements);
  auto mesh = Mesh(mesh_shape);
  const Tensor full = Pattern(shape, dtype, 3);
  const Tensor full_gpu = *full.To(kGpu);
  for (int64_t rank = 0; rank < mesh->num_ranks(); ++rank) {
    absl::StatusOr<DTensor> cpu = DistributeTensor(full, mesh, p, rank);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    absl::StatusOr<DTensor> gpu = DistributeTensor(full_gpu, mesh, p, rank);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    EXPECT_EQ(gpu->local().device(), kGpu) << "rank " << rank;
    EXPECT_TRUE(gpu->local().is_contiguous());
    EXPECT_EQ(gpu->local().shape(), cpu->local().shape()) << "rank " << rank;
    EXPECT_EQ(gpu->global_shape(), full.shape());
    EXPECT_EQ(Bytes(gpu->local()), Bytes(cpu->local())) << "rank " << rank;
  }
}

TEST(DTensorOpsGpuTest, DistributeCutsTheSamePiecesOnTheGpu) {
  SDRT_SKIP_WITHOUT_GPU();
  for (DType dtype : kWholeByteDTypes) {
    ExpectSamePiecesAsCpu({5, 10}, dtype, {4}, "[S(0)]");
    ExpectSamePiecesAsCpu({3, 9}, dtype, {2}, "[S(1)]");
  }
  ExpectSamePiecesAsCpu({9}, DType::kInt64, {2}, "[_S(0, 2)]");
  ExpectSamePiecesAsCpu({4, 6}, DType::kFloat32, {3}, "[_S(1, 3)]");
  ExpectSamePiecesAsCpu({15, 5}, DType::kBFloat16, {2, 2}, "[_S(0, 2), S(0)]");
  ExpectSamePiecesAsCpu({18, 2}, DType::kInt32, {2, 2}, "[S(0), _S(0, 2)]");
  ExpectSamePiecesAsCpu({3, 4}, DType::kFloat32, {2, 2}, "[S(0), S(0)]");  // an empty piece
  ExpectSamePiecesAsCpu({0, 4}, DType::kFloat32, {2}, "[S(0)]");
  ExpectSamePiecesAsCpu({}, DType::kFloat64, {2}, "[R]");
  // Partial: zeros / ones off coordinate 0, filled on the host and copied to the GPU.
  for (DType dtype : kWholeByteDTypes) {
    ExpectSamePiecesAsCpu({3, 4}, dtype, {3}, "[P(sum)]");
    ExpectSamePiecesAsCpu({3, 4}, dtype, {3}, "[P(product)]");
    ExpectSamePiecesAsCpu({3, 4}, dtype, {2}, "[P(max)]");
  }
  ExpectSamePiecesAsCpu({5, 4}, DType::kFloat32, {2, 2}, "[P(sum), S(1)]");
  ExpectSamePiecesAsCpu({3, 2}, DType::kInt64, {2, 2}, "[P(sum), P(product)]");
}

TEST(DTensorOpsGpuTest, DistributeTakesAStridedGpuTensor) {
  SDRT_SKIP_WITHOUT_GPU();
  const Tensor base = Pattern({6, 8}, DType::kFloat32);
  const Tensor cpu_view = *base.Slice(1, 1, 8, 2);  // 6x4, strides (8, 2)
  const Tensor gpu_view = *(*base.To(kGpu)).Slice(1, 1, 8, 2);
  ASSERT_FALSE(gpu_view.is_contiguous());
  auto mesh = Mesh({2});
  for (const char* placements : {"[S(1)]", "[_S(0, 2)]"}) {
    const std::vector<Placement> p = *ParsePlacements(placements);
    for (int64_t rank = 0; rank < 2; ++rank) {
      const DTensor cpu = *DistributeTensor(cpu_view, mesh, p, rank);
      absl::StatusOr<DTensor> gpu = DistributeTensor(gpu_view, mesh, p, rank);
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      EXPECT_EQ(Bytes(gpu->local()), Bytes(cpu.local())) << placements << " rank " << rank;
    }
  }
}

// DistributeTensor then FullTensor on a one-rank mesh over NCCL: the local is the whole
// tensor, on the GPU, and FullTensor returns it.
TEST(DTensorOpsGpuTest, RoundTripOnOneRankMesh) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  for (const char* mesh_placements : {"[S(0)]", "[P(sum)]", "[_S(0, 2)]", "[_S(1, 3)]", "[R]"}) {
    SCOPED_TRACE(mesh_placements);
    DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1}), *comm);
    const Tensor full = Pattern({5, 6}, DType::kFloat32, 1);
    absl::StatusOr<DTensor> dt =
        DistributeTensor(*full.To(kGpu), mc.mesh(), *ParsePlacements(mesh_placements), 0);
    ASSERT_TRUE(dt.ok()) << dt.status();
    EXPECT_EQ(dt->local().device(), kGpu);
    absl::StatusOr<Tensor> gathered = FullTensor(*dt, mc);
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    EXPECT_EQ(gathered->device(), kGpu);
    EXPECT_EQ(gathered->shape(), full.shape());
    EXPECT_EQ(Bytes(*gathered), Bytes(full));
  }
  // A two-dim mesh of size-1 dims.
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1, 1}), *comm);
  const Tensor full = Pattern({4, 3}, DType::kBFloat16, 2);
  const DTensor dt = *DistributeTensor(
      *full.To(kGpu), mc.mesh(), {Placement::Partial(ReduceOp::kSum), Placement::Shard(1)}, 0);
  absl::StatusOr<Tensor> gathered = FullTensor(dt, mc);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(Bytes(*gathered), Bytes(full));
}

// FromLocal exchanges the local shapes over NCCL (AllGatherBytes staged through the GPU).
TEST(DTensorOpsGpuTest, FromLocalOverNccl) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const Tensor local = *Pattern({7, 3}, DType::kInt32).To(kGpu);
  absl::StatusOr<DTensor> dt = FromLocal(local, Mesh({1}), {Placement::Shard(0)}, *comm);
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_EQ(dt->global_shape(), (IntVector{7, 3}));
  EXPECT_EQ(dt->local().data_ptr(), local.data_ptr());
  dt = FromLocal(local, Mesh({1}), {Placement::Shard(0)}, *comm, IntVector{8, 3}, "w");
  EXPECT_EQ(dt.status().code(), absl::StatusCode::kInvalidArgument);
}

// Two local shards of one rank (and an empty one), one of them a strided view, on the GPU.
TEST(DTensorOpsGpuTest, GatherShardedTensorWithTwoLocalGpuShards) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const Tensor want = Pattern({5, 4}, DType::kFloat16, 4);
  const Tensor want_gpu = *want.To(kGpu);
  // Rows [3, 5) and rows [0, 3) (listed in that order), plus an empty shard at row 5.
  const std::vector<ShardMetadata> metadata = {
      {{3, 0}, {2, 4}, {0, kGpu}}, {{0, 0}, {3, 4}, {0, kGpu}}, {{5, 0}, {0, 4}, {0, kGpu}}};
  // Rows [0, 3) as a strided view: every other row of a 6x4 GPU tensor holding them.
  Tensor spread = *Tensor::Zeros({6, 4}, DType::kFloat16, kGpu);
  Tensor rows = *spread.Slice(0, 0, 6, 2);
  ASSERT_TRUE(rows.CopyFrom(*want_gpu.Narrow(0, 0, 3)).ok());
  ASSERT_FALSE(rows.is_contiguous());
  const std::vector<LocalShard> local = {
      {*want_gpu.Narrow(0, 3, 2), metadata[0]},
      {rows, metadata[1]},
      {*Tensor::Empty({0, 4}, DType::kFloat16, kGpu), metadata[2]}};
  absl::StatusOr<ShardedTensor> st = ShardedTensor::Make({5, 4}, DType::kFloat16, metadata, local);
  ASSERT_TRUE(st.ok()) << st.status();
  absl::StatusOr<Tensor> full = GatherShardedTensor(*st, *comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->device(), kGpu);
  EXPECT_EQ(full->shape(), (IntVector{5, 4}));
  EXPECT_EQ(Bytes(*full), Bytes(want));

  // A box in the middle of a 2-D tensor: everything else is zero.
  const std::vector<ShardMetadata> box = {{{1, 1}, {2, 2}, {0, kGpu}}};
  const Tensor piece = *Pattern({2, 2}, DType::kInt64, 5).To(kGpu);
  full = GatherShardedTensor(*ShardedTensor::Make({4, 4}, DType::kInt64, box, {{piece, box[0]}}),
                             *comm);
  ASSERT_TRUE(full.ok()) << full.status();
  const Tensor host = *full->To(Device::CPU());
  const Tensor piece_host = *piece.To(Device::CPU());
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const bool inside = r >= 1 && r < 3 && c >= 1 && c < 3;
      EXPECT_EQ(host.data<int64_t>()[r * 4 + c],
                inside ? piece_host.data<int64_t>()[(r - 1) * 2 + (c - 1)] : 0)
          << r << "," << c;
    }
  }
}

// CPU tensors through the NCCL communicator: the results stay on the CPU.
TEST(DTensorOpsGpuTest, CpuTensorsThroughNccl) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const Tensor want = Pattern({6, 3}, DType::kFloat32, 6);
  const std::vector<ShardMetadata> metadata = {{{0, 0}, {4, 3}, {0, Device::CPU()}},
                                               {{4, 0}, {2, 3}, {0, Device::CPU()}}};
  const std::vector<LocalShard> local = {{*want.Narrow(0, 4, 2), metadata[1]},
                                         {*want.Narrow(0, 0, 4), metadata[0]}};
  absl::StatusOr<Tensor> full =
      GatherShardedTensor(*ShardedTensor::Make({6, 3}, DType::kFloat32, metadata, local), *comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->device().is_cpu());
  EXPECT_EQ(Bytes(*full), Bytes(want));

  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1}), *comm);
  const DTensor dt = *DistributeTensor(want, mc.mesh(), {Placement::Shard(1)}, 0);
  EXPECT_TRUE(dt.local().device().is_cpu());
  absl::StatusOr<Tensor> gathered = FullTensor(dt, mc);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_TRUE(gathered->device().is_cpu());
  EXPECT_EQ(Bytes(*gathered), Bytes(want));

  // A rank without local shards follows the device of the others (here: none, so the
  // communicator's device).
  full = GatherShardedTensor(*ShardedTensor::Make({0, 3}, DType::kFloat32, {}, {}), *comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->device(), kGpu);
  EXPECT_EQ(full->shape(), (IntVector{0, 3}));
}

TEST(DTensorOpsGpuTest, ShardsOnTwoDevicesAreAnError) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const std::vector<ShardMetadata> metadata = {{{0}, {2}, {0, Device::CPU()}},
                                               {{2}, {2}, {0, kGpu}}};
  const std::vector<LocalShard> local = {{Pattern({2}, DType::kFloat32), metadata[0]},
                                         {*Pattern({2}, DType::kFloat32).To(kGpu), metadata[1]}};
  absl::StatusOr<Tensor> full =
      GatherShardedTensor(*ShardedTensor::Make({4}, DType::kFloat32, metadata, local), *comm);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("both the CPU and cuda:0"));
}

// The Partial fill on the GPU, into a strided view: only the view's elements change.
TEST(DTensorOpsGpuTest, FillPartialIdentityOnTheGpu) {
  SDRT_SKIP_WITHOUT_GPU();
  const DeviceMesh mesh = *DeviceMesh::Create({2, 2});
  const int64_t coordinate[] = {1, 0};
  for (DType dtype : kWholeByteDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMax}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
      const std::vector<Placement> placements = {Placement::Partial(op), Placement::Replicate()};
      const Tensor base = Pattern({4, 6}, dtype, 7);
      Tensor cpu = *base.Clone();
      Tensor cpu_view = *cpu.Slice(1, 0, 6, 3);
      Tensor gpu = *base.To(kGpu);
      Tensor gpu_view = *gpu.Slice(1, 0, 6, 3);
      ASSERT_TRUE(FillPartialIdentity(cpu_view, mesh, placements, coordinate).ok());
      const absl::Status s = FillPartialIdentity(gpu_view, mesh, placements, coordinate);
      ASSERT_TRUE(s.ok()) << s;
      EXPECT_EQ(Bytes(gpu), Bytes(cpu));
      EXPECT_EQ(Bytes(gpu) == Bytes(base), op == ReduceOp::kMax);
    }
  }
}

TEST(DTensorOpsGpuTest, FullTensorRejectsALocalTheCommunicatorDoesNotServe) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1}), *comm);
  absl::StatusOr<DTensor> dt = DTensor::Make(*Tensor::Meta({2, 3}, DType::kFloat32), mc.mesh(),
                                             {Placement::Shard(0)}, IntVector{2, 3});
  ASSERT_TRUE(dt.ok()) << dt.status();
  absl::StatusOr<Tensor> full = FullTensor(*dt, mc);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("does not serve"));
}

}  // namespace
}  // namespace sdrt
