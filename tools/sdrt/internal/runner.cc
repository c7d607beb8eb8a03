#include "sdrt/tools/sdrt/internal/runner.h"

#include <cstring>
#include <iostream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {

bool IsMultiRankCommand(absl::string_view command) {
  return command == "gather" || command == "load" || command == "reshard" || command == "bench";
}

absl::Status Runner::Step(const std::function<absl::Status()>& step) {
  return AgreeUnlessTimedOut(session_.world(), step());
}

absl::Status Runner::CollectiveStep(const std::function<absl::Status()>& step) {
  return AgreeUnlessTimedOut(session_.world(), step(), /*collective=*/true);
}

absl::StatusOr<double> Runner::TimedStep(const std::function<absl::Status()>& step) {
  return Timed(step, /*collective=*/false);
}

absl::StatusOr<double> Runner::TimedCollective(const std::function<absl::Status()>& step) {
  return Timed(step, /*collective=*/true);
}

absl::StatusOr<double> Runner::Timed(const std::function<absl::Status()>& step, bool collective) {
  absl::Status status = session_.world().Barrier();
  if (!status.ok()) return status;
  const double start = NowSeconds();
  status = step();
  const double seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session_.world(), status, collective);
  if (!status.ok()) return status;
  return seconds;
}

absl::Status Runner::ShareFromRankZero(std::string* bytes) {
  return session_.world().BroadcastBytes(bytes, 0);
}

absl::StatusOr<std::vector<int64_t>> Runner::AllGather(int64_t mine) {
  absl::StatusOr<std::vector<std::string>> all =
      AllGather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  if (!all.ok()) return all.status();
  std::vector<int64_t> out;
  for (const std::string& s : *all) {
    if (s.size() != sizeof(int64_t)) {
      return absl::InternalError("AllGather: a rank sent a malformed value");
    }
    int64_t v = 0;
    std::memcpy(&v, s.data(), sizeof(v));
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> Runner::AllGather(const std::string& mine) {
  return session_.world().AllGatherBytes(mine);
}

std::function<void(int64_t, int64_t)> Runner::Progress() const {
  // Rank 0's own bytes: with several ranks the line says whose they are.
  return ProgressLine(size() > 1 ? absl::StrCat(command_, ", rank 0's bytes") : command_,
                      rank() == 0 && (!options_.json || options_.progress), options_.progress);
}

int RunOnRanks(absl::string_view command, const SharedOptions& options,
               const std::function<absl::StatusOr<Report>(Runner&)>& body) {
  absl::StatusOr<Session> session =
      StartSession(options.device == "cuda", TimeoutFrom(options.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut(command, session.status());
    // Before the session there is no communicator: the launcher's rank says who prints.
    return ReportError(command, session.status(), LauncherRank());
  }
  const int rank = session->rank();
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut(command, status);  // every live rank prints; the job ends
    return ReportError(command, status, rank);
  };
  Runner run(command, options, *session);
  absl::StatusOr<Report> report = body(run);
  if (!report.ok()) return fail(report.status());
  std::vector<int64_t> peaks;
  if (report->peak_memory) {
    absl::StatusOr<std::vector<int64_t>> all = run.AllGather(PeakRssBytes());
    if (!all.ok()) return fail(all.status());
    peaks = *std::move(all);
  }
  if (rank == 0 && options.json) {
    if (report->peak_memory) report->json["peak_rss_bytes"] = peaks;
    std::cout << JsonText(report->json, 2) << "\n";
  } else if (rank == 0) {
    std::cout << report->text;
    if (report->peak_memory) {
      std::cout << "  peak memory per rank:";
      for (int64_t p : peaks) std::cout << " " << HumanBytes(p);
      std::cout << "\n";
    }
  }
  return report->verdict.ok() ? kExitOk : ReportError(command, report->verdict, rank);
}

std::string Ranks(int64_t n) { return Counted(n, "rank"); }

nlohmann::ordered_json TransferStatsJson(const TransferStats& stats) {
  return {{"wire_bytes", stats.wire_bytes},
          {"optimum_bytes", stats.optimum_bytes},
          {"self_bytes", stats.self_bytes},
          {"max_sent_bytes", stats.max_sent_bytes},
          {"max_received_bytes", stats.max_received_bytes},
          {"internode_bytes", stats.internode_bytes},
          {"exchanges", stats.exchanges},
          {"collectives", stats.collectives}};
}

}  // namespace sdrt::cli
