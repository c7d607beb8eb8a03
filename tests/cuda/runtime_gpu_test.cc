// cuda/runtime.h and Tensor's CUDA paths on a real device (ctest label gpu). Every test
// skips with a message when no CUDA device is present.
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

bool SameBytes(const Tensor& a, const Tensor& b) {
  Tensor ca = *a.Contiguous();
  Tensor cb = *b.Contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

TEST(CudaRuntimeGpu, StreamEventAndBuffers) {
  SDRT_SKIP_WITHOUT_GPU();
  CudaStream stream = *CudaStream::Create(0);
  CudaEvent start = *CudaEvent::Create(0);
  CudaEvent end = *CudaEvent::Create(0);
  ASSERT_TRUE(start.Record(stream.handle()).ok());
  DeviceBuffer buffer = *AllocateDeviceBuffer(1 << 20, 0);
  EXPECT_EQ(buffer->device(), Device::CUDA(0));
  EXPECT_EQ(buffer->kind(), StorageKind::kCudaDevice);
  ASSERT_TRUE(end.Record(stream.handle()).ok());
  ASSERT_TRUE(end.Synchronize().ok());
  EXPECT_GE(*CudaEvent::ElapsedMs(start, end), 0.0f);
  std::shared_ptr<Storage> pinned = *PinnedHostAllocator::Allocate(4096);
  EXPECT_TRUE(pinned->is_pinned());
}

// A completion event (timing disabled) records and synchronizes but has no timestamps:
// CUDA refuses ElapsedMs for it.
TEST(CudaRuntimeGpu, EventWithoutTimingHasNoElapsedTime) {
  SDRT_SKIP_WITHOUT_GPU();
  CudaEvent done = *CudaEvent::Create(0, EventTiming::kDisabled);
  EXPECT_EQ(done.device(), 0);
  ASSERT_TRUE(done.Record(nullptr).ok());
  ASSERT_TRUE(done.Synchronize().ok());
  const absl::Status elapsed = CudaEvent::ElapsedMs(done, done).status();
  EXPECT_FALSE(elapsed.ok());
  EXPECT_THAT(elapsed.message(), HasSubstr("cudaEventElapsedTime"));
  EXPECT_THAT(elapsed.message(), HasSubstr("cudaErrorInvalidResourceHandle"));
}

// Zeros on the device: a device memset (no host buffer), every byte zero, also for a
// size that is not a multiple of 4 bytes, after the memory held other bytes.
TEST(CudaRuntimeGpu, ZerosOnTheDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1001, 3}, {0}, {}}) {
    {  // cudaMalloc often hands back memory just freed: make it hold non-zero bytes
      Tensor noise = *test::HashBytes(shape, DType::kUInt8, 9).To(Device::CUDA(0));
    }
    absl::StatusOr<Tensor> zeros = Tensor::Zeros(shape, DType::kUInt8, Device::CUDA(0));
    ASSERT_TRUE(zeros.ok()) << zeros.status();
    EXPECT_EQ(zeros->device(), Device::CUDA(0));
    EXPECT_EQ(zeros->storage()->kind(), StorageKind::kCudaDevice);
    Tensor host = *zeros->To(Device::CPU());
    const auto* bytes = static_cast<const uint8_t*>(host.data_ptr());
    EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + host.nbytes()),
              std::vector<uint8_t>(static_cast<size_t>(host.nbytes()), 0))
        << testing::PrintToString(shape);
  }
}

TEST(CudaRuntimeGpu, TensorRoundTripThroughTheDeviceIsBitExact) {
  SDRT_SKIP_WITHOUT_GPU();
  Tensor host = test::HashBytes({33, 17, 2, 1}, DType::kBFloat16, 7);
  Tensor dev = *host.To(Device::CUDA(0));
  EXPECT_EQ(dev.device(), Device::CUDA(0));
  EXPECT_TRUE(SameBytes(*dev.To(Device::CPU()), host));
  // Strided on both sides: a column slice on the device into a transposed host tensor.
  Tensor cols = *dev.Slice(1, 1, 17, 3);
  Tensor expected = *host.Slice(1, 1, 17, 3);
  EXPECT_TRUE(SameBytes(*cols.To(Device::CPU()), expected));
  Tensor dst = *Tensor::Empty(cols.shape(), cols.dtype());
  ASSERT_TRUE(dst.CopyFrom(cols).ok());
  EXPECT_TRUE(SameBytes(dst, expected));
  Tensor on_device = *Tensor::Empty(expected.shape(), expected.dtype(), Device::CUDA(0));
  ASSERT_TRUE(on_device.CopyFrom(expected).ok());
  EXPECT_TRUE(SameBytes(*on_device.To(Device::CPU()), expected));
  EXPECT_TRUE(SameBytes(*(*Tensor::Zeros({5}, DType::kInt32, Device::CUDA(0))).To(Device::CPU()),
                        *Tensor::Zeros({5}, DType::kInt32)));
}

// A strided CUDA source copied to the host is packed on the caller's stream, after the
// caller's own work there: here 64 MiB still arriving on a non-blocking stream (which the
// legacy default stream does not wait for) when the copy of its first column is asked.
TEST(CudaRuntimeGpu, StagedCopyToHostRunsOnTheCallersStream) {
  SDRT_SKIP_WITHOUT_GPU();
  constexpr int64_t kRows = int64_t{8} << 20;
  CudaStream stream = *CudaStream::Create(0);
  Tensor host = test::HashBytes({kRows, 2}, DType::kFloat32, 31);
  std::shared_ptr<Storage> pinned = *PinnedHostAllocator::Allocate(host.nbytes(), 0);
  Tensor staged = *Tensor::FromStorage(pinned, DType::kFloat32, {kRows, 2});
  ASSERT_TRUE(staged.CopyFrom(host).ok());
  Tensor device = *Tensor::Empty({kRows, 2}, DType::kFloat32, Device::CUDA(0));
  ASSERT_TRUE(device.CopyFrom(staged, /*non_blocking=*/true, stream.handle()).ok());
  Tensor column = *device.Slice(1, 0, 1, 1);
  ASSERT_FALSE(column.is_contiguous());
  Tensor out = *Tensor::Empty(column.shape(), DType::kFloat32);
  ASSERT_TRUE(out.CopyFrom(column, /*non_blocking=*/false, stream.handle()).ok());
  EXPECT_TRUE(SameBytes(out, *host.Slice(1, 0, 1, 1)));
}

TEST(CudaRuntimeGpu, DLPackExportsCudaTensors) {
  SDRT_SKIP_WITHOUT_GPU();
  Tensor dev = *test::HashBytes({4, 4}, DType::kFloat32, 3).To(Device::CUDA(0));
  DLManagedTensor* managed = *ToDLPack(dev);
  EXPECT_EQ(managed->dl_tensor.device.device_type, kDLCUDA);
  Tensor back = *FromDLPack(managed);
  EXPECT_EQ(back.data_ptr(), dev.data_ptr());
  EXPECT_EQ(back.device(), Device::CUDA(0));
}

}  // namespace
}  // namespace sdrt
