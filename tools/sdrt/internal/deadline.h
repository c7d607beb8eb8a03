// `--timeout SECONDS` on the commands that communicate (`sdrt gather`, `sdrt load`, and
// `sdrt demo`, which hands it to them), and what such a command does when a collective
// runs past it (docs/SEMANTICS.md 11.16): the error cannot be agreed across ranks (a rank
// is missing), so every live rank prints its own DeadlineExceeded, which names the op,
// the bucket and the ranks that did not arrive, and the MPI job is ended so that a stopped
// rank is not left behind. The exit status is 1 (a runtime failure).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_
#define SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_

#include <chrono>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::cli {

// Default 600 s (the library's, Communicator::kDefaultTimeout); at most a week.
inline constexpr double kDefaultTimeoutSeconds = 600;
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;

// Adds `--timeout SECONDS` to `cmd`, stored in *seconds (which holds the default); a value
// outside [0.001, kMaxTimeoutSeconds] is a usage error (exit 2).
void AddTimeoutOption(CLI::App* cmd, double* seconds);

// `seconds` as the communicators' timeout, in whole milliseconds (at least 1).
std::chrono::milliseconds TimeoutFrom(double seconds);

// The agreement of a step's outcome across the ranks (AgreeAcrossRanks over `world`),
// unless this rank's step timed out: then `local` comes back as it is, because a rank is
// missing and no agreement can be reached.
absl::Status AgreeUnlessTimedOut(Communicator& world, const absl::Status& local);

// When `status` is DeadlineExceeded: prints "sdrt <command>: <message>" on this rank's
// stderr, gives the other live ranks a moment to print theirs, and ends the MPI job with
// exit status 1 (MpiCommunicator::AbortJob); does not return. Without MPI (one process, no
// peer to wait for) and for any other status it returns at once and does nothing.
void EndJobIfTimedOut(absl::string_view command, const absl::Status& status);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_
