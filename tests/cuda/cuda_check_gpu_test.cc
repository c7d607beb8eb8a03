// cuda/cuda_check.h with a device (ctest label gpu; each test skips without one): the
// errors the macro and DiscardCudaError clear are really cleared. Without a driver CUDA's
// initialisation error is permanent, so this needs a GPU.
#include "gtest/gtest.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt {
namespace {

constexpr size_t kTooMuch = size_t{1} << 62;

TEST(CudaCheckGpu, ClearsTheErrorItReports) {
  SDRT_SKIP_WITHOUT_GPU();
  void* ptr = nullptr;
  absl::Status s = SDRT_CUDA_STATUS(cudaMalloc(&ptr, kTooMuch));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST(CudaCheckGpu, DiscardCudaErrorClearsTheError) {
  SDRT_SKIP_WITHOUT_GPU();
  void* ptr = nullptr;
  internal::DiscardCudaError(cudaMalloc(&ptr, kTooMuch));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  // Without the discard the error would still be there.
  EXPECT_EQ(cudaMalloc(&ptr, kTooMuch), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace sdrt
