// cuda/runtime.h on any machine: with no GPU (or no CUDA in the build) every call that
// needs a device fails with a Status, and zero-byte requests never reach CUDA.
#include "sdrt/cuda/runtime.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

TEST(CudaRuntime, NoDeviceMeansCleanErrors) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present; see the gpu tests";
  EXPECT_FALSE(CudaAvailable().ok());
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  EXPECT_FALSE(stream.ok());
  EXPECT_FALSE(stream.status().message().empty());
  EXPECT_FALSE(AllocateDeviceBuffer(1024, 0).ok());
  EXPECT_FALSE(PinnedHostAllocator::Allocate(1024).ok());
  char buffer[64];
  absl::StatusOr<HostRegistration> reg =
      HostRegistration::Register(buffer, 64, kHostRegisterDefault);
  EXPECT_FALSE(reg.ok());
  if (!BuiltWithCuda()) {
    EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(stream.status().message(), HasSubstr("built without CUDA"));
  } else {
    // CUDA's own error name is part of the message (cudaErrorNoDevice or a driver error).
    EXPECT_THAT(stream.status().message(), HasSubstr("cudaError"));
    EXPECT_THAT(stream.status().message(), HasSubstr("runtime.cc"));
  }
}

TEST(CudaRuntime, ZeroBytesAreNeverRegistered) {
  absl::StatusOr<HostRegistration> reg =
      HostRegistration::Register(nullptr, 0, kHostRegisterPortable);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_FALSE(reg->is_registered());
  EXPECT_TRUE(reg->Release().ok());
  std::shared_ptr<Storage> empty = *Storage::AllocateShared(0);
  EXPECT_TRUE(PinStorage(*empty, kHostRegisterPortable).ok());
  EXPECT_FALSE(empty->is_pinned());
}

TEST(CudaRuntime, PinStorageRefusesDeviceMemory) {
  std::shared_ptr<Storage> fake_device = Storage::Wrap(
      reinterpret_cast<void*>(0x1000), 64, Device::CUDA(0), StorageKind::kCudaDevice, nullptr);
  absl::Status s = PinStorage(*fake_device, kHostRegisterDefault);
  if (!BuiltWithCuda()) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("cuda:0"));
  }
}

TEST(CudaRuntime, VersionStringSaysWhatWasBuilt) {
  const std::string v = CudaVersionString();
  if (BuiltWithCuda()) {
    EXPECT_THAT(v, HasSubstr("CUDA runtime 13."));
  } else {
    EXPECT_EQ(v, "built without CUDA");
  }
}

}  // namespace
}  // namespace sdrt
