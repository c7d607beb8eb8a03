// The one runner of the multi-rank commands (`sdrt gather`, `sdrt load`, `sdrt reshard`,
// `sdrt bench`): it starts the session (session.h) with --device and --timeout, runs the
// command's body on every rank, and owns what they share: every step's outcome agreed
// across the ranks (every rank learns the first failing rank's status and all exit with the
// same code), the deadline (a rank that does not arrive within --timeout ends the job with
// exit 1 after every live rank printed its line: deadline.h), the errors printed once
// (rank 0), peak memory per rank, and the report (text, or JSON with --json) printed by
// rank 0. A command parses its options, calls one library verb through a Runner and
// describes its result in a Report; it makes no collective of its own.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_RUNNER_H_
#define SDRT_TOOLS_SDRT_INTERNAL_RUNNER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {

// Whether `command` runs as one job across mpiexec's ranks (gather, load, reshard, bench):
// then its errors, CLI11's parse errors included, are printed once, by rank 0 (before MPI
// starts, the launcher's rank 0). The other commands are a whole program in every process.
bool IsMultiRankCommand(absl::string_view command);

// What a command's body hands the runner on success, the same on every rank.
struct Report {
  nlohmann::ordered_json json;  // printed with --json (indent 2), "peak_rss_bytes" appended
  std::string text;             // printed otherwise, "  peak memory per rank: ..." appended
  // Whether the runner gathers and appends peak memory per rank (not for `sdrt bench`,
  // whose JSON is a list).
  bool peak_memory = true;
  // The verdict after the report is printed (a check that found other bytes): when not
  // OK, rank 0 prints it as the command's error and every rank exits with its code.
  absl::Status verdict;
};

// The ranks of one run, as the body sees them. Every call is collective (every rank makes
// it, in the same order) unless it says otherwise.
class Runner {
 public:
  Runner(absl::string_view command, const SharedOptions& options, Session& session)
      : command_(command), options_(options), session_(session) {}

  int rank() const { return session_.rank(); }         // not collective
  int size() const { return session_.size(); }         // not collective
  const Session& session() const { return session_; }  // not collective
  // The communicator tensor data moves over (NCCL with --device cuda); not collective.
  Communicator& data() const { return session_.data(); }

  // Runs `step` on this rank, then agrees on its outcome: every rank gets the status of
  // the lowest failing rank ("rank R: <message>", AgreeAcrossRanks), or OK. A step that
  // timed out (DeadlineExceeded: a rank is missing) comes back as it is.
  absl::Status Step(const std::function<absl::Status()>& step);
  // Step of one library call that agrees within (LoadStateDict, GatherStateDict,
  // ReshardStateDict): its verdict, the same on every rank, is the error as it is, its ranks
  // not named a second time (internal::AgreeOnCollectiveResult).
  absl::Status CollectiveStep(const std::function<absl::Status()>& step);
  // Step after a barrier, so that the clock starts when every rank is ready: the seconds
  // this rank's step took, or the agreed error.
  absl::StatusOr<double> TimedStep(const std::function<absl::Status()>& step);
  // TimedStep of one library call that agrees within, as CollectiveStep.
  absl::StatusOr<double> TimedCollective(const std::function<absl::Status()>& step);
  // Rank 0's *bytes on every rank.
  absl::Status ShareFromRankZero(std::string* bytes);
  // Every rank's `mine`, in rank order.
  absl::StatusOr<std::vector<int64_t>> AllGather(int64_t mine);
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine);

  // A progress callback for a library verb's options: lines on rank 0's stderr when it is a
  // terminal and not --json, or with --progress (output.h, ProgressLine); not collective.
  std::function<void(int64_t, int64_t)> Progress() const;

 private:
  absl::StatusOr<double> Timed(const std::function<absl::Status()>& step, bool collective);

  std::string command_;
  const SharedOptions& options_;
  Session& session_;
};

// Runs `body` on every rank of a session started from `options` (--device, --timeout) and
// returns the process's exit code, the same on every rank: the report printed by rank 0
// and 0 (or the verdict's code), or the error (a failed start, or the agreed status the body
// returned) printed once as "sdrt <command>: <message>" and its ExitCodeFor; past the
// deadline, every live rank's line and exit 1 (EndJobIfTimedOut). The body must return an
// error only as every rank does: one a Runner step returned, or one of the same options on
// every rank.
int RunOnRanks(absl::string_view command, const SharedOptions& options,
               const std::function<absl::StatusOr<Report>(Runner&)>& body);

// Report helpers shared by the commands: "1 rank", "4 ranks".
std::string Ranks(int64_t n);
// A transfer's figures as --json prints them: wire, optimum and self bytes, the busiest
// rank's sent and received bytes, the bytes between nodes, exchanges and collectives.
nlohmann::ordered_json TransferStatsJson(const TransferStats& stats);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_RUNNER_H_
