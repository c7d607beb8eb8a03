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
#include "sdrt/tests/support/loopback_communicator.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

using test::Loopback;

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

// A float32 tensor of `shape` holding start, start + 1, ...
Tensor Floats(IntSpan shape, int64_t start) { return test::Arange(shape, DType::kFloat32, start); }

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

TEST(DTensorOps, ZeroDimShardedTensorGathersItsOneElement) {
  Loopback comm(Device::CPU(), 0, 1, "mpi", false);
  const ShardMetadata m{{}, {}, {0, Device::CPU()}};
  absl::StatusOr<ShardedTensor> st =
      ShardedTensor::Make({}, DType::kFloat32, {m}, {{Floats({}, 42), m}});
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
  const Tensor row = Floats({1, 6}, 10);
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

}  // namespace
}  // namespace sdrt
