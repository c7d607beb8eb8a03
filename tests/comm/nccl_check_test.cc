// SDRT_NCCL_* turns NCCL result codes into Status. Runs without a GPU.
#include "sdrt/comm/internal/nccl_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

absl::Status Fails(ncclResult_t result) {
  SDRT_NCCL_RETURN_IF_ERROR(result);
  return absl::OkStatus();
}

TEST(NcclCheck, ResultsMapToStatusCodesWithNcclsText) {
  EXPECT_TRUE(Fails(ncclSuccess).ok());
  absl::Status s = Fails(ncclInvalidArgument);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("result failed at"));
  EXPECT_THAT(s.message(), HasSubstr("nccl_check_test.cc:"));
  EXPECT_THAT(s.message(), HasSubstr(ncclGetErrorString(ncclInvalidArgument)));
  EXPECT_EQ(Fails(ncclRemoteError).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(Fails(ncclSystemError).code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace sdrt
