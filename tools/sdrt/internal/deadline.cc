#include "sdrt/tools/sdrt/internal/deadline.h"

#include <iostream>

#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"
#if SDRT_CLI_HAVE_MPI
#include "sdrt/comm/mpi_communicator.h"
#endif

namespace sdrt::cli {

absl::Status AgreeUnlessTimedOut(Communicator& world, const absl::Status& local, bool collective) {
  if (local.code() == absl::StatusCode::kDeadlineExceeded) return local;
  return collective ? internal::AgreeOnCollectiveResult(world, local)
                    : AgreeAcrossRanks(world, "", "", {}, local);
}

void EndJobIfTimedOut(absl::string_view command, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) return;
#if SDRT_CLI_HAVE_MPI
  ReportError(command, status, /*rank=*/0);  // printed here, whatever this rank's number
  MpiCommunicator::AbortJob(kExitRuntimeError);
#endif
}

}  // namespace sdrt::cli
