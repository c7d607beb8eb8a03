#include "sdrt/cuda/cuda_check.h"

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::Status CudaStatus(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  int device = -1;
  (void)cudaGetDevice(&device);
  // Clear the error (ours, and any cudaGetDevice just raised) so later calls do not
  // report it again; sticky errors (a failed kernel) stay set inside the context and
  // will show up on the next call anyway.
  (void)cudaGetLastError();
  const std::string message =
      absl::StrCat(call, " failed at ", file, ":", line, " on device ", device, ": ",
                   cudaGetErrorName(err), " (", cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(message);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace sdrt::internal
