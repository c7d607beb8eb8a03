#include "sdrt/comm/internal/nccl_check.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return absl::OkStatus();
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  const std::string message =
      absl::StrCat(call, " failed at ", file, ":", line, " on device ", device, ": NCCL error ",
                   static_cast<int>(result), " (", ncclGetErrorString(result), ")");
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclInProgress:
      return absl::UnavailableError(message);
    case ncclRemoteError:
      return absl::AbortedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status AbortedBy(absl::string_view where, const absl::Status& status) {
  const bool timed_out = status.code() == absl::StatusCode::kDeadlineExceeded;
  return absl::Status(
      status.code(),
      absl::StrCat(where, ": ", status.message(), "; the NCCL communicator was aborted",
                   timed_out ? " (is a rank missing from the collective?)" : ""));
}

absl::Status WithInitHint(ncclResult_t result, const absl::Status& status) {
  if (result != ncclInvalidUsage || status.ok()) return status;
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(),
                   "; two ranks on one GPU? NCCL refuses that at init (\"Duplicate GPU "
                   "detected\", shown with NCCL_DEBUG=WARN): give each rank of a node its own "
                   "GPU, e.g. one per rank through CUDA_VISIBLE_DEVICES"));
}

}  // namespace sdrt::internal
