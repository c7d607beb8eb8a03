// DeviceGuard and the device discipline of cuda/runtime.h on a real device (ctest label gpu;
// each test skips without one). CTest runs every test in its own process, so a test can
// see whether a CUDA context exists before it starts; run as one binary, the tests that
// need a context-free device skip when an earlier test created one.
#include <cuda_runtime_api.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

using internal::DeviceGuard;
using internal::PrimaryContextIsActive;

int CurrentDevice() {
  int device = -1;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

bool ContextActive(int device) {
  absl::StatusOr<bool> active = PrimaryContextIsActive(device);
  EXPECT_TRUE(active.ok()) << active.status();
  return active.ok() && *active;
}

TEST(DeviceGuardGpu, PrimaryContextIsActiveSeesACreatedContext) {
  SDRT_SKIP_WITHOUT_GPU();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // makes the context of device 0 exist
  EXPECT_TRUE(ContextActive(0));
  absl::StatusOr<bool> invalid = PrimaryContextIsActive(CudaDeviceCount());
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument) << invalid.status();
  EXPECT_THAT(invalid.status().message(), ::testing::HasSubstr("PrimaryContextIsActive"));
}

// One GPU is enough: entering the device that is already current must not call
// cudaSetDevice, which (CUDA >= 12) would create device 0's context in a fresh thread.
TEST(DeviceGuardGpu, EnteringTheCurrentDeviceCreatesNoContext) {
  SDRT_SKIP_WITHOUT_GPU();
  if (ContextActive(0)) GTEST_SKIP() << "device 0 already has a context (run alone via ctest)";
  std::thread([] {
    ASSERT_EQ(CurrentDevice(), 0);  // a new thread starts on device 0
    {
      DeviceGuard guard;
      ASSERT_TRUE(guard.Enter(0).ok());
      EXPECT_EQ(CurrentDevice(), 0);
    }
    EXPECT_EQ(CurrentDevice(), 0);
    EXPECT_FALSE(ContextActive(0));
  }).join();
}

// Needs two GPUs: work on device 1 from a thread that never used device 0 leaves no
// context on device 0, and the thread stays on device 1; once device 0 has a context, the
// guard does switch back to it.
TEST(DeviceGuardGpu, RestoresOnlyToADeviceWithAContext) {
  SDRT_SKIP_WITHOUT_GPU();
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  if (ContextActive(0)) GTEST_SKIP() << "device 0 already has a context (run alone via ctest)";
  std::thread([] {
    {
      DeviceGuard guard;
      ASSERT_TRUE(guard.Enter(1).ok());
      void* ptr = nullptr;
      ASSERT_EQ(cudaMalloc(&ptr, 256), cudaSuccess);
      ASSERT_EQ(cudaFree(ptr), cudaSuccess);
    }
    EXPECT_FALSE(ContextActive(0));
    EXPECT_EQ(CurrentDevice(), 1);  // not restored to device 0, which has no context

    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // now device 0 is in use
    ASSERT_TRUE(ContextActive(0));
    {
      DeviceGuard guard;
      ASSERT_TRUE(guard.Enter(1).ok());
      EXPECT_EQ(CurrentDevice(), 1);
    }
    EXPECT_EQ(CurrentDevice(), 0);
  }).join();
}

// Makes every kind of runtime object for `device` and checks after each call that the
// calling thread is still on the device it was on.
void ExerciseRuntimeFor(int device) {
  const int caller = CurrentDevice();
  absl::StatusOr<CudaStream> stream = CudaStream::Create(device);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(stream->device(), device);
  EXPECT_EQ(CurrentDevice(), caller);
  absl::StatusOr<DeviceBuffer> buffer = AllocateDeviceBuffer(4096, device);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(CurrentDevice(), caller);
  absl::StatusOr<CudaEvent> event = CudaEvent::Create(device, EventTiming::kDisabled);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->device(), device);
  ASSERT_TRUE(event->Record(stream->handle()).ok());
  ASSERT_TRUE(event->Synchronize().ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(CurrentDevice(), caller);
  absl::StatusOr<std::shared_ptr<Storage>> pinned = PinnedHostAllocator::Allocate(4096, device);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CurrentDevice(), caller);
  Tensor zeros = *Tensor::Zeros({64}, DType::kFloat32, Device::CUDA(device));
  EXPECT_EQ(CurrentDevice(), caller);
}

// The runtime's allocations and objects for the device a thread is on leave it there
// (with two GPUs: the last device, opening no context on device 0).
TEST(DeviceGuardGpu, RuntimeCallsForTheCallersDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  const int last = CudaDeviceCount() - 1;
  const bool fresh = !ContextActive(0);
  std::thread([last, fresh] {
    ASSERT_TRUE(SetCurrentCudaDevice(last).ok());
    ExerciseRuntimeFor(last);
    EXPECT_EQ(CurrentDevice(), last);
    if (last > 0 && fresh) {
      EXPECT_FALSE(ContextActive(0));
    }
  }).join();
}

// The runtime's allocations and objects for another device leave a caller on device 0
// there (they used to cudaSetDevice and stay).
TEST(DeviceGuardGpu, RuntimeCallsLeaveTheCallersDevice) {
  SDRT_SKIP_WITHOUT_GPU();
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices";
  std::thread([] {
    ASSERT_TRUE(SetCurrentCudaDevice(0).ok());
    ExerciseRuntimeFor(1);
    EXPECT_EQ(CurrentDevice(), 0);
  }).join();
}

// A helper thread that works for one device (the broadcast pipeline's packer and slicer)
// calls SetCurrentCudaDevice first; a bad ordinal is InvalidArgument.
TEST(DeviceGuardGpu, SetCurrentCudaDeviceInAThread) {
  SDRT_SKIP_WITHOUT_GPU();
  const int last = CudaDeviceCount() - 1;
  std::thread([last] {
    ASSERT_TRUE(SetCurrentCudaDevice(last).ok());
    EXPECT_EQ(CurrentDevice(), last);
    const absl::Status bad = SetCurrentCudaDevice(CudaDeviceCount());
    EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(bad.message(), ::testing::HasSubstr("cudaSetDevice"));
    EXPECT_EQ(CurrentDevice(), last);
  }).join();
}

}  // namespace
}  // namespace sdrt
