// SDRT_CUDA_* turns CUDA error codes into Status with the call, file:line and CUDA's
// names. Runs without a GPU: the codes are passed in directly (clearing the error needs a
// device: cuda_check_gpu_test.cc).
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

}  // namespace
}  // namespace sdrt
