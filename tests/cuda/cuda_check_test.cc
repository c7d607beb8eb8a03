// SDRT_CUDA_* turns CUDA error codes into Status with the call, file:line and CUDA's
// names, and clears the error. Runs without a GPU: the codes are passed in directly.
#include "sdrt/cuda/cuda_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

absl::Status Fails(cudaError_t err) {
  SDRT_CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

TEST(CudaCheck, SuccessIsOk) { EXPECT_TRUE(Fails(cudaSuccess).ok()); }

TEST(CudaCheck, ErrorsCarryCallLocationAndName) {
  absl::Status s = Fails(cudaErrorMemoryAllocation);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("err failed at"));
  EXPECT_THAT(s.message(), HasSubstr("cuda_check_test.cc:"));
  EXPECT_THAT(s.message(), HasSubstr("cudaErrorMemoryAllocation"));
  EXPECT_EQ(Fails(cudaErrorNoDevice).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Fails(cudaErrorInvalidValue).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Fails(cudaErrorLaunchFailure).code(), absl::StatusCode::kInternal);
}

// With a device, a non-sticky error is cleared by the macro (without a driver CUDA's
// initialisation error is permanent, so this needs a GPU).
TEST(CudaCheck, ClearsTheErrorItReports) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    GTEST_SKIP() << "no CUDA device: initialisation errors cannot be cleared";
  }
  void* ptr = nullptr;
  absl::Status s = SDRT_CUDA_STATUS(cudaMalloc(&ptr, size_t{1} << 62));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace sdrt
