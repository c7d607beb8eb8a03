// WithInitHint (comm/internal/nccl_check.h): the hint added to an NCCL communicator's
// creation error when NCCL's init answered ncclInvalidUsage, as it does for two ranks on one
// GPU. Runs without a GPU.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/internal/nccl_check.h"

namespace sdrt {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(NcclInitHint, InvalidUsageAtInitNamesTwoRanksOnOneGpu) {
  const absl::Status nccl = SDRT_NCCL_STATUS(ncclInvalidUsage);
  const absl::Status hinted = internal::WithInitHint(ncclInvalidUsage, nccl);
  EXPECT_EQ(hinted.code(), nccl.code());
  EXPECT_THAT(hinted.message(),
              AllOf(HasSubstr(nccl.message()), HasSubstr("two ranks on one GPU?"),
                    HasSubstr("Duplicate GPU detected"), HasSubstr("CUDA_VISIBLE_DEVICES")));
}

TEST(NcclInitHint, OtherResultsAreLeftAsTheyAre) {
  for (const ncclResult_t result :
       {ncclInvalidArgument, ncclSystemError, ncclRemoteError, ncclInternalError, ncclInProgress}) {
    const absl::Status nccl = SDRT_NCCL_STATUS(result);
    EXPECT_EQ(internal::WithInitHint(result, nccl), nccl) << ncclGetErrorString(result);
  }
  // A deadline passed while NCCL was still in progress: no hint either.
  const absl::Status late = absl::DeadlineExceededError("ncclCommInitRankConfig not complete");
  EXPECT_THAT(internal::WithInitHint(ncclInProgress, late).message(), Not(HasSubstr("two ranks")));
  EXPECT_TRUE(internal::WithInitHint(ncclInvalidUsage, absl::OkStatus()).ok());
}

}  // namespace
}  // namespace sdrt
