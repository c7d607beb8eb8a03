// cuda/runtime.h on any machine: with no GPU (or no CUDA in the build) every call that
// needs a device fails with a Status, and zero-byte requests never reach CUDA.
#include "sdrt/cuda/runtime.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

// Unavailable, naming the call: sdrt's function without CUDA in the build (`sdrt_call`),
// else CUDA's failed call (`cuda_call`) and CUDA's error name.
void ExpectNoDevice(const absl::Status& s, const std::string& sdrt_call,
                    const std::string& cuda_call) {
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  if (!BuiltWithCuda()) {
    EXPECT_THAT(s.message(), HasSubstr(sdrt_call + ": sdrt was built without CUDA"));
  } else {
    EXPECT_THAT(s.message(), HasSubstr(cuda_call + "("));
    EXPECT_THAT(s.message(), HasSubstr("cudaError"));
  }
}

TEST(CudaRuntime, NoDeviceMeansCleanErrors) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present; see the gpu tests";
  ExpectNoDevice(CudaAvailable(), "CudaAvailable", "cudaGetDeviceCount");
  // With CUDA, each call first asks for the current device (its device guard, or the
  // resolution of kCurrentCudaDevice), which is where the missing device shows.
  absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
  ExpectNoDevice(stream.status(), "CudaStream::Create", "cudaGetDevice");
  ExpectNoDevice(AllocateDeviceBuffer(1024, 0).status(), "AllocateDeviceBuffer", "cudaGetDevice");
  ExpectNoDevice(CudaEvent::Create(0).status(), "CudaEvent::Create", "cudaGetDevice");
  ExpectNoDevice(PinnedHostAllocator::Allocate(1024).status(), "PinnedHostAllocator::Allocate",
                 "cudaGetDevice");
  ExpectNoDevice(SetCurrentCudaDevice(0), "SetCurrentCudaDevice", "cudaSetDevice");
  char buffer[64];
  absl::StatusOr<HostRegistration> reg =
      HostRegistration::Register(buffer, 64, kHostRegisterDefault);
  ExpectNoDevice(reg.status(), "HostRegistration::Register", "cudaGetDevice");
  if (!BuiltWithCuda()) {
    EXPECT_EQ(stream.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(stream.status().message(), HasSubstr("built without CUDA"));
  } else {
    // CUDA's own error name is part of the message (cudaErrorNoDevice or a driver error).
    EXPECT_THAT(stream.status().message(), HasSubstr("cudaError"));
    EXPECT_THAT(stream.status().message(), HasSubstr("device_guard.cc"));
  }
}

TEST(CudaRuntime, ZeroBytesAreNeverRegistered) {
  absl::StatusOr<HostRegistration> reg =
      HostRegistration::Register(nullptr, 0, kHostRegisterPortable);
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_FALSE(reg->is_registered());
  EXPECT_EQ(reg->num_chunks(), 0);
  EXPECT_TRUE(reg->Release().ok());
  std::shared_ptr<Storage> empty = *Storage::AllocateShared(0);
  EXPECT_TRUE(PinStorage(*empty, kHostRegisterPortable).ok());
  EXPECT_FALSE(empty->is_pinned());
}

// Arguments are checked before CUDA is asked anything, so this holds on any machine.
TEST(CudaRuntime, RegistrationRefusesBadArgumentsFirst) {
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without CUDA: every registration is Unavailable";
  char buffer[64];
  HostRegistrationOptions options;
  options.chunk_bytes = 0;
  absl::Status chunk = HostRegistration::Register(buffer, 64, 0, options).status();
  EXPECT_EQ(chunk.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(chunk.message(), "HostRegistration: chunk_bytes must be >= 1, got 0");
  absl::Status negative = HostRegistration::Register(buffer, -1, 0).status();
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message(), "HostRegistration: negative size -1");
  absl::Status null = HostRegistration::Register(nullptr, 64, 0).status();
  EXPECT_EQ(null.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(null.message(), "HostRegistration: null pointer");
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
