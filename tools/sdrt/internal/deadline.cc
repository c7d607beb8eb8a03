#include "sdrt/tools/sdrt/internal/deadline.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/output.h"
#if SDRT_CLI_HAVE_MPI
#include "sdrt/comm/mpi_communicator.h"
#endif

namespace sdrt::cli {

void AddTimeoutOption(CLI::App* cmd, double* seconds) {
  cmd->add_option("--timeout", *seconds,
                  "seconds any collective may wait for the other ranks before every live rank "
                  "gives up (exit 1, naming the ranks that did not arrive)")
      // NaN passes any range check (every comparison with it is false): refused first.
      ->check(CLI::Validator(
          [](std::string& text) {
            double value = 0;
            return absl::SimpleAtod(text, &value) && std::isfinite(value)
                       ? std::string()
                       : std::string("must be a finite number of seconds");
          },
          "SECONDS"))
      ->check(CLI::Range(0.001, kMaxTimeoutSeconds))
      ->capture_default_str();
}

std::chrono::milliseconds TimeoutFrom(double seconds) {
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000)));
}

absl::Status AgreeUnlessTimedOut(Communicator& world, const absl::Status& local) {
  if (local.code() == absl::StatusCode::kDeadlineExceeded) return local;
  return AgreeAcrossRanks(world, "", "", {}, local);
}

void EndJobIfTimedOut(absl::string_view command, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDeadlineExceeded) return;
#if SDRT_CLI_HAVE_MPI
  ReportError(command, status, /*rank=*/0);  // printed here, whatever this rank's number
  std::cerr << std::flush;
  // The live ranks give up within moments of each other (the roll call); let theirs print
  // before MPI_Abort ends them.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  MpiCommunicator::AbortJob(kExitRuntimeError);
#endif
}

}  // namespace sdrt::cli
