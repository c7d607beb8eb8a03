// The NCCL check macro, the twin of cuda/cuda_check.h's: an ncclResult_t becomes an
// absl::Status carrying the call text, file:line, the current CUDA device and NCCL's own
// error string. Private to the NCCL backend (it includes nccl.h); only built with NCCL.
//
//   SDRT_NCCL_RETURN_IF_ERROR(ncclAllGather(send, recv, count, ncclBfloat16, comm, stream));
#ifndef SDRT_COMM_INTERNAL_NCCL_CHECK_H_
#define SDRT_COMM_INTERNAL_NCCL_CHECK_H_

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// OK for ncclSuccess; otherwise a Status describing `call` at file:line. The code maps
// ncclInvalidArgument/ncclInvalidUsage to InvalidArgument, ncclInProgress to
// Unavailable, ncclRemoteError to Aborted, everything else to Internal.
absl::Status NcclStatus(ncclResult_t result, const char* call, const char* file, int line);

// `status`, which made the caller abort an NCCL communicator, prefixed with `where` and
// saying so (with the likely cause of a timeout).
absl::Status AbortedBy(absl::string_view where, const absl::Status& status);

// `status`, the error of an NCCL communicator's creation whose NCCL result (of
// ncclCommInitRankConfig or, after it, ncclCommGetAsyncError) was `result`, with the likely
// cause added when that is ncclInvalidUsage: it is how NCCL's init refuses two ranks on one
// GPU ("Duplicate GPU detected", a line NCCL prints only with NCCL_DEBUG=WARN). Any other
// result leaves `status` as it is.
absl::Status WithInitHint(ncclResult_t result, const absl::Status& status);

}  // namespace sdrt::internal

#define SDRT_NCCL_STATUS(expr) ::sdrt::internal::NcclStatus((expr), #expr, __FILE__, __LINE__)

#define SDRT_NCCL_RETURN_IF_ERROR(expr)                        \
  do {                                                         \
    ::absl::Status sdrt_nccl_status_ = SDRT_NCCL_STATUS(expr); \
    if (!sdrt_nccl_status_.ok()) return sdrt_nccl_status_;     \
  } while (0)

#endif  // SDRT_COMM_INTERNAL_NCCL_CHECK_H_
