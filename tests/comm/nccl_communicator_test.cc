// CPU tests of the NCCL backend (label cpu): what needs no GPU, i.e. argument checks made
// before any NCCL call, the unique id, and the dtype / reduce-op mapping tables.
#include "sdrt/comm/nccl_communicator.h"

#include <nccl.h>

#include <cstring>

#include "gtest/gtest.h"
#include "sdrt/comm/internal/divide.h"
#include "sdrt/comm/internal/nccl_types.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

TEST(NcclUniqueIdTest, GenerateGivesFreshIds) {
  absl::StatusOr<NcclUniqueId> a = NcclUniqueId::Generate();
  absl::StatusOr<NcclUniqueId> b = NcclUniqueId::Generate();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(std::memcmp(a->bytes, b->bytes, NcclUniqueId::kBytes), 0);
}

TEST(NcclCommunicatorTest, RankOutsideGroupIsInvalidArgument) {
  const NcclUniqueId id;
  for (auto [rank, size] : {std::pair{1, 1}, std::pair{-1, 2}, std::pair{0, 0}}) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::Create(rank, size, 0, id);
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << rank << " " << size;
    EXPECT_NE(comm.status().message().find("is not in [0, size"), absl::string_view::npos);
  }
}

TEST(NcclCommunicatorTest, DeviceBeyondVisibleOnesIsInvalidArgument) {
  const NcclUniqueId id;
  for (int device : {-1, CudaDeviceCount()}) {
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
        NcclCommunicator::Create(0, 1, device, id);
    EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_NE(comm.status().message().find("visible CUDA devices"), absl::string_view::npos)
        << comm.status();
  }
}

// The bootstrap checks every rank's device before ncclCommInitRank (one MPI rank here;
// skipped in a build without MPI, whose World is Unavailable).
TEST(NcclCommunicatorTest, BootstrapRejectsInvisibleDeviceOnEveryRank) {
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> world = MpiCommunicator::World();
  if (world.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << world.status();
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::CreateFromCommunicator(**world, CudaDeviceCount());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("rank 0's device is not a visible CUDA device"),
            absl::string_view::npos)
      << comm.status();
}

// DivideOnDevice checks its arguments before any CUDA call.
TEST(DivideOnDeviceTest, RejectsWhatAvgNeverDivides) {
  const absl::Status by_zero = internal::DivideOnDevice(nullptr, DType::kFloat32, 4, 0, nullptr);
  EXPECT_EQ(by_zero.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(by_zero.message().find("cannot divide 4 elements by 0"), absl::string_view::npos)
      << by_zero;
  for (DType dtype : {DType::kBool, DType::kInt16, DType::kFloat8E4M3FN}) {
    const absl::Status s = internal::DivideOnDevice(nullptr, dtype, 4, 2, nullptr);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DTypeName(dtype);
    EXPECT_NE(s.message().find("does not average"), absl::string_view::npos) << s;
  }
  EXPECT_TRUE(internal::DivideOnDevice(nullptr, DType::kFloat32, 0, 2, nullptr).ok());
}

TEST(NcclTypesTest, DTypeMapping) {
  const std::pair<DType, int> expected[] = {
      {DType::kBool, ncclUint8},      {DType::kUInt8, ncclUint8},
      {DType::kInt8, ncclInt8},       {DType::kInt16, ncclNumTypes},
      {DType::kInt32, ncclInt32},     {DType::kInt64, ncclInt64},
      {DType::kFloat16, ncclFloat16}, {DType::kBFloat16, ncclBfloat16},
      {DType::kFloat32, ncclFloat32}, {DType::kFloat64, ncclFloat64},
  };
  for (const auto& [dtype, nccl] : expected) {
    EXPECT_EQ(internal::NcclDataType(dtype), nccl) << DTypeName(dtype);
  }
  // What the dtype table never reduces has no NCCL type, float8 included.
  for (DType dtype : test::kAllDTypes) {
    if (!IsReducible(dtype)) {
      EXPECT_EQ(internal::NcclDataType(dtype), ncclNumTypes) << DTypeName(dtype);
    }
  }
}

TEST(NcclTypesTest, ReduceOpMapping) {
  EXPECT_EQ(internal::NcclReduceOp(DType::kFloat32, ReduceOp::kSum), ncclSum);
  EXPECT_EQ(internal::NcclReduceOp(DType::kFloat32, ReduceOp::kProduct), ncclProd);
  EXPECT_EQ(internal::NcclReduceOp(DType::kInt32, ReduceOp::kMin), ncclMin);
  EXPECT_EQ(internal::NcclReduceOp(DType::kInt32, ReduceOp::kMax), ncclMax);
  // avg: the sum, divided afterwards as the MPI backend divides (not ncclAvg).
  EXPECT_EQ(internal::NcclReduceOp(DType::kBFloat16, ReduceOp::kAvg), ncclSum);
  EXPECT_EQ(internal::NcclReduceOp(DType::kInt64, ReduceOp::kAvg), ncclSum);
  // bool: sum is logical or, product logical and (ProcessGroupNCCL).
  EXPECT_EQ(internal::NcclReduceOp(DType::kBool, ReduceOp::kSum), ncclMax);
  EXPECT_EQ(internal::NcclReduceOp(DType::kBool, ReduceOp::kProduct), ncclMin);
}

}  // namespace
}  // namespace sdrt
