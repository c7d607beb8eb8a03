// Single-process tests of core/distributed/dtensor_ops.h: a one-rank loopback communicator stands
// in for the backends (as in tests/comm/process_group_test.cc), so the device rules, the errors
// found before or by the metadata exchange and the 0-dim ShardedTensor run without MPI processes or
// a GPU. The multi-rank behaviour is in dtensor_ops_mpi_test.cc, the CUDA one in
// dtensor_ops_gpu_test.cc.
#include "sdrt/core/distributed/dtensor_ops.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/loopback_communicator.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

using test::Loopback;

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

Tensor Floats(IntSpan shape, float start) {
  Tensor t = *Tensor::Empty(shape, DType::kFloat32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + static_cast<float>(i);
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(DTensorOps, ZeroDimShardedTensorGathersItsOneElement) {
  Loopback comm(Device::CPU(), 0, 1, "mpi", false);
  const ShardMetadata m{{}, {}, {0, Device::CPU()}};
  absl::StatusOr<ShardedTensor> st =
      ShardedTensor::Make({}, DType::kFloat32, {m}, {{Floats({}, 42.0f), m}});
  ASSERT_TRUE(st.ok()) << st.status();
  absl::StatusOr<Tensor> full = GatherShardedTensor(*st, comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->dim(), 0);
  EXPECT_EQ(full->data<float>()[0], 42.0f);
}

TEST(DTensorOps, ShardedGatherPlacesShardsInAnyOrderAndZeroesTheRest) {
  Loopback comm(Device::CPU(), 0, 1, "mpi", false);
  const std::vector<ShardMetadata> m = {{{0, 2}, {2, 2}, {0, Device::CPU()}},
                                        {{2, 0}, {1, 3}, {0, Device::CPU()}}};
  // The second shard is a strided view (every other element of a row).
  const Tensor row = Floats({1, 6}, 10.0f);
  const std::vector<LocalShard> local = {{*row.Slice(1, 0, 6, 2), m[1]}, {Floats({2, 2}, 1), m[0]}};
  absl::StatusOr<Tensor> full =
      GatherShardedTensor(*ShardedTensor::Make({3, 4}, DType::kFloat32, m, local), comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(Values(*full), (std::vector<float>{0, 0, 1, 2,  //
                                               0, 0, 3, 4,  //
                                               10, 12, 14, 0}));
}

TEST(DTensorOps, ShardedGatherRejectsShardsOnADeviceTheCommunicatorDoesNotServe) {
  Loopback comm(Device::CPU(), 0, 1, "mpi", false);
  const ShardMetadata m{{0}, {3}, {0, Device::CPU()}};
  absl::StatusOr<ShardedTensor> st =
      ShardedTensor::Make({3}, DType::kFloat32, {m}, {{*Tensor::Meta({3}, DType::kFloat32), m}});
  ASSERT_TRUE(st.ok()) << st.status();
  absl::StatusOr<Tensor> full = GatherShardedTensor(*st, comm);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("rank 0's local shards are not all on one"));
  EXPECT_THAT(full.status().message(), HasSubstr("is on meta, which the mpi communicator"));
}

// CPU tensors through a communicator on a GPU that stages them (the NCCL backend's rule):
// the results stay on the CPU; no CUDA memory is touched.
TEST(DTensorOps, CpuTensorsThroughAStagingCommunicatorStayOnTheCpu) {
  Loopback comm(Device::CUDA(0), 0, 1, "nccl", true);
  const ShardMetadata m{{0, 0}, {2, 3}, {0, Device::CPU()}};
  absl::StatusOr<Tensor> full = GatherShardedTensor(
      *ShardedTensor::Make({2, 3}, DType::kFloat32, {m}, {{Floats({2, 3}, 1), m}}), comm);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(full->device().is_cpu());
  EXPECT_EQ(Values(*full), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1, 1}), comm);
  const Tensor source = Floats({4, 3}, 0);
  absl::StatusOr<DTensor> dt = DistributeTensor(
      source, mc.mesh(), {Placement::Partial(ReduceOp::kSum), Placement::Shard(0)}, 0);
  ASSERT_TRUE(dt.ok()) << dt.status();
  EXPECT_TRUE(dt->local().device().is_cpu());
  absl::StatusOr<Tensor> gathered = FullTensor(*dt, mc);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  EXPECT_EQ(Values(*gathered), Values(source));
}

TEST(DTensorOps, FullTensorRejectsALocalTheCommunicatorDoesNotServe) {
  Loopback comm(Device::CPU(), 0, 1, "mpi", false);
  DeviceMeshComm mc = *DeviceMeshComm::Create(Mesh({1}), comm);
  const DTensor dt = *DTensor::Make(*Tensor::Meta({2, 3}, DType::kFloat32), mc.mesh(),
                                    {Placement::Shard(0)}, IntVector{2, 3});
  absl::StatusOr<Tensor> full = FullTensor(dt, mc);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(), HasSubstr("which the mpi communicator (on cpu)"));
}

TEST(DTensorOps, DistributeTensorOfMetaAndUndefinedTensors) {
  // A meta full tensor gives a meta local of the local shape, for every rank.
  auto mesh = Mesh({4});
  const Tensor meta = *Tensor::Meta({10, 3}, DType::kBFloat16);
  for (int64_t rank = 0; rank < 4; ++rank) {
    for (const char* placements : {"[S(0)]", "[_S(0, 2)]", "[P(sum)]"}) {
      absl::StatusOr<DTensor> dt = DistributeTensor(meta, mesh, *ParsePlacements(placements), rank);
      ASSERT_TRUE(dt.ok()) << dt.status();
      EXPECT_TRUE(dt->local().is_meta());
      EXPECT_EQ(dt->local().shape(),
                *ComputeLocalShape(meta.shape(), *mesh, *ParsePlacements(placements), rank));
    }
  }
  EXPECT_EQ(DistributeTensor(Tensor(), mesh, {Placement::Shard(0)}, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributeTensor(meta, mesh, {Placement::Shard(0)}, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The Partial fill of DistributeTensor on a strided source.
TEST(DTensorOps, DistributeTensorFillsPartialsOffCoordinateZero) {
  auto mesh = Mesh({2, 2});
  const Tensor base = Floats({3, 8}, 1);
  const Tensor strided = *base.Slice(1, 0, 8, 2);  // 3x4
  const std::vector<Placement> p = {Placement::Partial(ReduceOp::kSum),
                                    Placement::Partial(ReduceOp::kProduct)};
  const std::vector<std::vector<float>> want = {
      Values(*strided.Contiguous()), std::vector<float>(12, 1.0f), std::vector<float>(12, 0.0f),
      std::vector<float>(12, 0.0f)};
  for (int64_t rank = 0; rank < 4; ++rank) {
    absl::StatusOr<DTensor> dt = DistributeTensor(strided, mesh, p, rank);
    ASSERT_TRUE(dt.ok()) << dt.status();
    EXPECT_EQ(Values(dt->local()), want[rank]) << "rank " << rank;
  }
}

}  // namespace
}  // namespace sdrt
