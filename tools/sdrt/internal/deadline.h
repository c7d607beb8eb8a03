// What a multi-rank command (runner.h) does when a collective runs past `--timeout
// SECONDS` (options.h; docs/SEMANTICS.md 11.16): the error cannot be agreed across ranks (a
// rank is missing), so every live rank prints its own DeadlineExceeded, which names the op,
// the bucket and the ranks that did not arrive, and the MPI job is ended so that a stopped
// rank is not left behind. The exit status is 1 (a runtime failure).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_
#define SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::cli {

// The agreement of a step's outcome across the ranks (AgreeAcrossRanks over `world`; with
// `collective`, the step was one library call that agrees within, whose verdict on every
// rank comes back as it is: internal::AgreeOnCollectiveResult), unless this rank's step
// timed out: then `local` comes back as it is, because a rank is missing and no agreement
// can be reached.
absl::Status AgreeUnlessTimedOut(Communicator& world, const absl::Status& local,
                                 bool collective = false);

// When `status` is DeadlineExceeded: prints "sdrt <command>: <message>" on this rank's
// stderr, gives the other live ranks a moment to print theirs, and ends the MPI job with
// exit status 1 (MpiCommunicator::AbortJob); does not return. Without MPI (one process, no
// peer to wait for) and for any other status it returns at once and does nothing.
void EndJobIfTimedOut(absl::string_view command, const absl::Status& status);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_DEADLINE_H_
