// cuda/runtime.h and Tensor's CUDA paths on a real device (ctest label gpu). Every test
// skips with a message when no CUDA device is present.
#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

bool SameBytes(const Tensor& a, const Tensor& b) {
  Tensor ca = *a.Contiguous();
  Tensor cb = *b.Contiguous();
  return ca.nbytes() == cb.nbytes() && std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

TEST(CudaRuntimeGpu, StreamEventAndBuffers) {
  SDRT_SKIP_WITHOUT_GPU();
  CudaStream stream = *CudaStream::Create(0);
  CudaEvent start = *CudaEvent::Create();
  CudaEvent end = *CudaEvent::Create();
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

// case-020: registrations are undone when the memory is released, ten times over.
TEST(CudaRuntimeGpu, Case020RegistrationIsReleasedWithTheStorage) {
  SDRT_SKIP_WITHOUT_GPU();
  for (int i = 0; i < 10; ++i) {
    std::shared_ptr<Storage> shared = *Storage::AllocateShared(1024 * 4);
    ASSERT_TRUE(PinStorage(*shared, kHostRegisterPortable).ok());
    EXPECT_TRUE(shared->is_pinned());
    void* ptr = shared->data();
    shared.reset();  // unregisters, then unmaps
    // Registering a fresh range at the same address would fail if the old one leaked.
    std::shared_ptr<Storage> again = *Storage::AllocateCpu(4096);
    absl::StatusOr<HostRegistration> reg =
        HostRegistration::Register(again->data(), 4096, kHostRegisterDefault);
    ASSERT_TRUE(reg.ok()) << reg.status() << " (previous range " << ptr << ")";
    EXPECT_TRUE(reg->Release().ok());
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
