// GPU tests of the NCCL backend (label gpu; each skips without a device): one rank
// (size 1) on device 0, so every collective must leave the data as it was (avg divides by
// 1) while going through NCCL, the staging of CPU tensors (case-013), split and the byte
// calls; and avg's division kernel against the host's. Several ranks:
// nccl_multi_gpu_test.cc.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/comm/internal/divide.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tests/support/nccl_single_rank.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using test::FiniteBytes;
using test::kWholeByteDTypes;

std::string Bytes(const Tensor& t) {
  Tensor cpu = *t.To(Device::CPU());
  return std::string(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
}

TEST(NcclCommunicatorGpuTest, Identity) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->device(), Device::CUDA(0));
  EXPECT_NE(comm->stream(), nullptr);
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(NcclCommunicatorGpuTest, AllGatherEveryDType) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  for (DType dtype : kWholeByteDTypes) {
    const Tensor expected = FiniteBytes({37}, dtype);
    Tensor input = *expected.To(Device::CUDA(0));
    Tensor output = *Tensor::Zeros({37}, dtype, Device::CUDA(0));
    ASSERT_TRUE(comm->AllGather(output, input).ok()) << DTypeName(dtype);
    EXPECT_EQ(Bytes(output), Bytes(expected)) << DTypeName(dtype);
    Tensor v_output = *Tensor::Zeros({37}, dtype, Device::CUDA(0));
    const int64_t counts[] = {37};
    ASSERT_TRUE(comm->AllGatherV(v_output, input, counts).ok()) << DTypeName(dtype);
    EXPECT_EQ(Bytes(v_output), Bytes(expected)) << DTypeName(dtype);
  }
}

TEST(NcclCommunicatorGpuTest, BroadcastEveryDTypeAsOneGroup) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  std::vector<Tensor> tensors;
  std::vector<std::string> expected;
  for (DType dtype : kWholeByteDTypes) {
    tensors.push_back(*FiniteBytes({19}, dtype, 3).To(Device::CUDA(0)));
    expected.push_back(Bytes(tensors.back()));
  }
  ASSERT_TRUE(comm->Broadcast(absl::MakeSpan(tensors), 0).ok());
  for (size_t i = 0; i < tensors.size(); ++i) EXPECT_EQ(Bytes(tensors[i]), expected[i]) << i;
}

TEST(NcclCommunicatorGpuTest, AllReduceEveryDTypeAndOp) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  for (DType dtype : kWholeByteDTypes) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      const Tensor expected = FiniteBytes({23}, dtype, 5);
      Tensor tensor = *expected.To(Device::CUDA(0));
      const absl::Status s = comm->AllReduce(tensor, op);
      // What the dtype table never reduces, int16 (NCCL has no 16-bit integer) and an
      // average of bools are refused.
      const bool unsupported = !IsReducible(dtype) || dtype == DType::kInt16 ||
                               (dtype == DType::kBool && op == ReduceOp::kAvg);
      if (unsupported) {
        EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << DTypeName(dtype) << s;
        continue;
      }
      ASSERT_TRUE(s.ok()) << DTypeName(dtype) << " " << ReduceOpName(op) << ": " << s;
      EXPECT_EQ(Bytes(tensor), Bytes(expected)) << DTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
}

// case-013: CPU tensors are staged through the GPU and come back on the CPU.
TEST(NcclCommunicatorGpuTest, CpuTensorsAreStaged) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  const Tensor expected = FiniteBytes({11}, DType::kFloat32, 1);

  Tensor reduced = *expected.Clone();
  ASSERT_TRUE(comm->AllReduce(reduced, ReduceOp::kSum).ok());
  EXPECT_TRUE(reduced.device().is_cpu());
  EXPECT_EQ(Bytes(reduced), Bytes(expected));

  std::vector<Tensor> tensors = {*Tensor::Zeros({1}, DType::kFloat32), *expected.Clone()};
  ASSERT_TRUE(comm->Broadcast(absl::MakeSpan(tensors), 0).ok());
  EXPECT_EQ(Bytes(tensors[1]), Bytes(expected));
  EXPECT_EQ(Bytes(tensors[0]), std::string(4, '\0'));

  Tensor gathered = *Tensor::Zeros({11}, DType::kFloat32);
  ASSERT_TRUE(comm->AllGather(gathered, expected).ok());
  EXPECT_EQ(Bytes(gathered), Bytes(expected));
  // In place, and a CPU input gathered into a CUDA output.
  Tensor in_place = *expected.Clone();
  ASSERT_TRUE(comm->AllGather(in_place, in_place).ok());
  EXPECT_EQ(Bytes(in_place), Bytes(expected));
  Tensor on_gpu = *Tensor::Zeros({11}, DType::kFloat32, Device::CUDA(0));
  ASSERT_TRUE(comm->AllGather(on_gpu, expected).ok());
  EXPECT_EQ(Bytes(on_gpu), Bytes(expected));
}

TEST(NcclCommunicatorGpuTest, Bytes) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  for (const std::string& text : {std::string(), std::string("sdrt"), std::string(100000, 'x')}) {
    std::string bytes = text;
    ASSERT_TRUE(comm->BroadcastBytes(&bytes, 0).ok());
    EXPECT_EQ(bytes, text);
    absl::StatusOr<std::vector<std::string>> all = comm->AllGatherBytes(text);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(*all, std::vector<std::string>{text});
  }
}

TEST(NcclCommunicatorGpuTest, Split) {
  SDRT_SKIP_WITHOUT_GPU();
  std::unique_ptr<NcclCommunicator> comm = test::SingleRankNccl();
  ASSERT_NE(comm, nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> none = comm->Split(-1, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> child = comm->Split(7, 0);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_NE(*child, nullptr);
  EXPECT_EQ((*child)->rank(), 0);
  EXPECT_EQ((*child)->size(), 1);
  comm.reset();  // the child outlives its parent
  Tensor t = *FiniteBytes({5}, DType::kInt32).To(Device::CUDA(0));
  const std::string before = Bytes(t);
  ASSERT_TRUE((*child)->AllReduce(t, ReduceOp::kMax).ok());
  EXPECT_EQ(Bytes(t), before);
  EXPECT_TRUE((*child)->Barrier().ok());
}

// avg's division on the device gives the MPI backend's host division, bit for bit, for
// every dtype the NCCL backend averages (its host twin is DivideBy in
// comm/mpi_communicator.cc: integers truncate, 16-bit floats divide in float32).
TEST(DivideOnDeviceGpuTest, MatchesTheHostDivision) {
  SDRT_SKIP_WITHOUT_GPU();
  const DType dtypes[] = {DType::kUInt8,   DType::kInt8,     DType::kInt32,   DType::kInt64,
                          DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64};
  for (DType dtype : dtypes) {
    for (int divisor : {3, 7}) {
      // Signed values for the integers, odd counts so that every width ends mid-word.
      const Tensor input = test::ValuePattern({1001}, dtype, divisor);
      Tensor expected = *input.Clone();
      for (int64_t i = 0; i < expected.numel(); ++i) {
        switch (dtype) {
          case DType::kUInt8:
            expected.data<uint8_t>()[i] =
                static_cast<uint8_t>(expected.data<uint8_t>()[i] / divisor);
            break;
          case DType::kInt8:
            expected.data<int8_t>()[i] = static_cast<int8_t>(expected.data<int8_t>()[i] / divisor);
            break;
          case DType::kInt32:
            expected.data<int32_t>()[i] /= divisor;
            break;
          case DType::kInt64:
            expected.data<int64_t>()[i] /= divisor;
            break;
          case DType::kFloat16: {
            uint16_t& h = expected.data<uint16_t>()[i];
            h = internal::FloatToFloat16(internal::Float16ToFloat(h) / static_cast<float>(divisor));
            break;
          }
          case DType::kBFloat16: {
            uint16_t& h = expected.data<uint16_t>()[i];
            h = internal::FloatToBFloat16(internal::BFloat16ToFloat(h) /
                                          static_cast<float>(divisor));
            break;
          }
          case DType::kFloat32:
            expected.data<float>()[i] /= static_cast<float>(divisor);
            break;
          default:
            expected.data<double>()[i] /= divisor;
        }
      }
      Tensor data = *input.To(Device::CUDA(0));
      ASSERT_TRUE(
          internal::DivideOnDevice(data.data_ptr(), dtype, data.numel(), divisor, nullptr).ok());
      EXPECT_EQ(Bytes(data), Bytes(expected)) << DTypeName(dtype) << " / " << divisor;
    }
  }
}

// Skipped in a build without MPI (World is Unavailable there).
TEST(NcclCommunicatorGpuTest, BootstrapOverMpi) {
  SDRT_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> world = MpiCommunicator::World();
  if (world.status().code() == absl::StatusCode::kUnavailable) GTEST_SKIP() << world.status();
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::CreateFromCommunicator(**world, 0);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), (*world)->rank());
  EXPECT_EQ((*comm)->size(), (*world)->size());
  EXPECT_TRUE((*comm)->Barrier().ok());
}

}  // namespace
}  // namespace sdrt
