// ProcessGroup picks the communicator by tensor device. A one-rank loopback communicator
// stands in for the backends, so this runs without MPI processes or a GPU.
#include "sdrt/comm/process_group.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tests/support/loopback_communicator.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

using test::Loopback;

TEST(ProcessGroup, ChoosesTheBackendByTensorDevice) {
  auto cpu = std::make_unique<Loopback>(Device::CPU(), 0, 1, "mpi");
  auto cuda = std::make_unique<Loopback>(Device::CUDA(0), 0, 1, "nccl");
  Communicator* cpu_ptr = cpu.get();
  Communicator* cuda_ptr = cuda.get();
  ProcessGroup pg = *ProcessGroup::Create(std::move(cpu), std::move(cuda));
  EXPECT_EQ(*pg.For(Device::CPU()), cpu_ptr);
  EXPECT_EQ(*pg.For(Device::CUDA(0)), cuda_ptr);
  EXPECT_EQ(&pg.metadata(), cpu_ptr);
  absl::Status wrong_gpu = pg.For(Device::CUDA(1)).status();
  EXPECT_EQ(wrong_gpu.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong_gpu.message(), HasSubstr("cuda:1"));
  // The chosen communicator really moves the tensor.
  Tensor in = *Tensor::Zeros({3}, DType::kInt32);
  in.data<int32_t>()[2] = 7;
  Tensor out = *Tensor::Zeros({3}, DType::kInt32);
  ASSERT_TRUE((*pg.For(in.device()))->AllGather(out, in).ok());
  EXPECT_EQ(out.data<int32_t>()[2], 7);
}

TEST(ProcessGroup, MissingBackendIsAnErrorNamingTheDevice) {
  ProcessGroup cpu_only =
      *ProcessGroup::Create(std::make_unique<Loopback>(Device::CPU(), 0, 1, "mpi"), nullptr);
  absl::Status s = cpu_only.For(Device::CUDA(0)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("no communicator for cuda:0 tensors"));
  // Without a CPU communicator, CPU tensors and metadata go to the CUDA one (it stages).
  ProcessGroup cuda_only =
      *ProcessGroup::Create(nullptr, std::make_unique<Loopback>(Device::CUDA(0), 0, 1, "nccl"));
  EXPECT_EQ((*cuda_only.For(Device::CPU()))->backend(), "nccl");
}

TEST(ProcessGroup, CreateChecksDevicesAndRanks) {
  absl::Status none = ProcessGroup::Create(nullptr, nullptr).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.message(), HasSubstr("ProcessGroup: no communicator given"));
  absl::Status swapped =
      ProcessGroup::Create(std::make_unique<Loopback>(Device::CUDA(0), 0, 1, "nccl"), nullptr)
          .status();
  EXPECT_EQ(swapped.code(), absl::StatusCode::kInvalidArgument) << swapped;
  EXPECT_THAT(swapped.message(), HasSubstr("works on cuda:0"));
  absl::Status ranks =
      ProcessGroup::Create(std::make_unique<Loopback>(Device::CPU(), 0, 2, "mpi"),
                           std::make_unique<Loopback>(Device::CUDA(0), 1, 2, "nccl"))
          .status();
  EXPECT_EQ(ranks.code(), absl::StatusCode::kInvalidArgument) << ranks;
  EXPECT_THAT(ranks.message(), HasSubstr("mpi is rank 0 of 2 but nccl is rank 1 of 2"));
}

}  // namespace
}  // namespace sdrt
