// `mpiexec -n N sdrt load SRC --mesh 2x2 --plan P [--read auto|all|root] [--verify INDIR]
// [--device cpu|cuda]`: what an inference engine does at start-up. SRC is a safetensors
// file, a Hugging Face folder or a folder of safetensors files (CheckpointSource). Rank 0
// opens SRC and sends the other ranks its tensor list; every rank makes meta DTensors with
// the plan's placements, which LoadStateDict fills, reading as --read says (the library's
// ReadMode: every rank its own bytes, rank 0 broadcasting, or auto's choice); every rank
// checks its pieces by xxh64 against INDIR's rank file (or against its own slicing of
// FILE without --verify). Rank 0 prints bytes moved, time, GB/s, collectives and peak
// memory per rank. SRC may also be an sdrt sharded folder in another layout: LoadStateDict
// then reshards its rank files, with a setup and a report of their own
// (internal/load_sharded.h).
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/load_setup.h"
#include "sdrt/tools/sdrt/internal/load_sharded.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {
namespace {

struct LoadArgs {
  std::string file;
  std::string mesh;
  std::string plan;
  std::string verify_dir;
  std::string device = "cpu";
  std::string read = "auto";
  int64_t bucket_mib = 256;
  bool json = false;
  bool progress = false;
  bool direct_io = false;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

// --read's value as the library's ReadMode.
absl::StatusOr<ReadMode> ReadFlag(const std::string& read) {
  for (const ReadMode mode : {ReadMode::kAuto, ReadMode::kAll, ReadMode::kRoot}) {
    if (read == ReadModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--read must be auto, all or root, got '", read, "'"));
}

int RunLoad(const LoadArgs& args) {
  absl::StatusOr<Session> session = StartSession(args.device, TimeoutFrom(args.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut("load", session.status());
    // Before the session there is no communicator: the launcher's rank says who prints.
    return ReportError("load", session.status(), LauncherRank());
  }
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("load", status);  // every live rank prints; the job ends
    return ReportError("load", status, session->rank());
  };
  // The arguments every source takes: the same on every rank, so is the verdict.
  const absl::StatusOr<ReadMode> read = ReadFlag(args.read);
  absl::Status status = read.status();
  if (status.ok() && !(args.bucket_mib >= 1 && args.bucket_mib <= kMaxBucketMib)) {
    status = absl::InvalidArgumentError(
        absl::StrCat("--bucket-mib must be in [1, ", kMaxBucketMib, "], got ", args.bucket_mib));
  }
  if (status.ok() && args.direct_io && *read == ReadMode::kRoot) {
    status = absl::InvalidArgumentError("--direct-io goes with --read all (or auto)");
  }
  if (!status.ok()) return fail(status);
  if (absl::StatusOr<CheckpointKind> kind = DetectCheckpointKind(args.file);
      kind.ok() && *kind == CheckpointKind::kShardedFolder) {
    return LoadShardedFolder({args.file, args.mesh, args.plan, args.verify_dir, *read,
                              args.bucket_mib, args.direct_io, args.json},
                             *session);
  }
  // Rank 0 opens SRC (its tensor list makes every rank's state dict); the other ranks too,
  // for LoadStateDict, unless only rank 0 reads.
  const absl::StatusOr<CheckpointSource> file =
      session->rank() == 0 || *read != ReadMode::kRoot
          ? CheckpointSource::Open(args.file)
          : absl::StatusOr<CheckpointSource>(
                absl::FailedPreconditionError("not opened off rank 0 (--read root)"));
  if (session->rank() == 0) status = file.status();
  // Every rank checks the mesh and the plan.
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::FromString(args.mesh);
  if (status.ok() && !mesh.ok()) status = mesh.status();
  if (status.ok() && mesh->num_ranks() != session->size()) {
    status =
        absl::InvalidArgumentError(absl::StrCat("--mesh ", args.mesh, " has ", mesh->num_ranks(),
                                                " ranks but mpiexec started ", session->size()));
  }
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(args.plan);
  if (status.ok() && !plan.ok()) status = plan.status();
  if (status.ok() && plan.ok()) status = plan->CheckMesh(*mesh);
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);

  absl::StatusOr<std::vector<SafetensorsTensorSpec>> infos =
      ShareTensorList(*session, session->rank() == 0 ? &*file : nullptr);
  if (!infos.ok()) return fail(infos.status());
  auto shared_mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  absl::StatusOr<Map> local = plan->MetaStateDict(*infos, shared_mesh, session->rank());
  status = AgreeUnlessTimedOut(session->world(), local.status());
  if (!status.ok()) return fail(status);

  LoadOptions options;
  options.comm = &session->data();
  options.read = *read;
  options.device = session->device;
  options.direct_io = args.direct_io;
  options.bucket_bytes = args.bucket_mib << 20;
  options.strict = true;
  LoadStats load_stats;
  options.stats = &load_stats;
  options.progress =
      ProgressLine("load", session->rank() == 0 && (!args.json || args.progress), args.progress);
  status = session->world().Barrier();
  if (!status.ok()) return fail(status);
  const double start = NowSeconds();
  status = LoadStateDict(file, *local, options).status();
  const double seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  const bool all = load_stats.read == ReadMode::kAll;
  const TransferStats& stats = load_stats.transfer;
  // An explicit --read names itself where the library says "requested".
  absl::string_view notes = load_stats.read_reason;
  const std::string reason = absl::ConsumePrefix(&notes, "requested")
                                 ? absl::StrCat("--read ", args.read, notes)
                                 : load_stats.read_reason;
  absl::StatusOr<std::vector<int64_t>> bytes_read =
      AllGatherInt64(session->world(), load_stats.bytes_read);
  if (!bytes_read.ok()) return fail(bytes_read.status());
  absl::StatusOr<std::vector<int64_t>> bytes_kept =
      AllGatherInt64(session->world(), load_stats.bytes_kept);
  if (!bytes_kept.ok()) return fail(bytes_kept.status());

  absl::StatusOr<std::vector<std::string>> wrong = VerifyPieces(args.verify_dir, args.file, args.mesh, session->rank(), *shared_mesh, *local);
  status = AgreeUnlessTimedOut(session->world(), wrong.status());
  if (!status.ok()) return fail(status);
  std::string wrong_text;
  for (const std::string& name : *wrong)
    absl::StrAppend(&wrong_text, wrong_text.empty() ? "" : ",", name);
  absl::StatusOr<std::vector<std::string>> all_wrong = session->world().AllGatherBytes(wrong_text);
  if (!all_wrong.ok()) return fail(all_wrong.status());
  absl::StatusOr<std::vector<int64_t>> peaks = AllPeakRssBytes(session->world());
  if (!peaks.ok()) return fail(peaks.status());
  // Every rank has every rank's verdict, so every rank ends with the same exit code: 2 when
  // the pieces differ from INDIR (the two checkpoints disagree: bad input, as gather's hash
  // check), 1 when they differ from this sdrt's own slicing of FILE (a runtime failure).
  std::vector<std::string> mismatches;
  for (int q = 0; q < session->size(); ++q) {
    if (!(*all_wrong)[q].empty())
      mismatches.push_back(absl::StrCat("rank ", q, ": ", (*all_wrong)[q]));
  }
  const int verdict = mismatches.empty()        ? kExitOk
                      : args.verify_dir.empty() ? kExitRuntimeError
                                                : kExitBadInput;
  if (session->rank() != 0) return verdict;

  int64_t bytes = 0;
  for (const SafetensorsTensorSpec& info : *infos) {
    int64_t numel = 1;
    for (int64_t s : info.shape) numel *= s;
    bytes += BytesForElements(info.dtype, numel).value_or(0);  // validated by the source
  }
  const double gbps = seconds > 0 ? bytes / seconds / 1e9 : 0;
  const std::string against = args.verify_dir.empty() ? args.file : args.verify_dir;
  std::vector<double> amplification;
  for (size_t q = 0; q < bytes_read->size(); ++q) {
    const int64_t kept = (*bytes_kept)[q];
    amplification.push_back(kept == 0 ? 1.0 : static_cast<double>((*bytes_read)[q]) / kept);
  }
  if (args.json) {
    nlohmann::ordered_json out = {{"command", "load"},
                                  {"file", args.file},
                                  {"mesh", args.mesh},
                                  {"plan", plan->name()},
                                  {"ranks", session->size()},
                                  {"device", args.device},
                                  {"read", ReadModeName(load_stats.read)},
                                  {"read_reason", reason},
                                  {"tensors", infos->size()},
                                  {"bytes", bytes},
                                  {"seconds", seconds},
                                  {"gbps", gbps},
                                  {"collectives", stats.collectives},
                                  {"exchanges", stats.exchanges},
                                  {"verified_against", against},
                                  {"mismatches", mismatches},
                                  {"bit_exact", mismatches.empty()},
                                  {"bytes_read", *bytes_read},
                                  {"bytes_kept", *bytes_kept},
                                  {"read_amplification", amplification},
                                  {"peak_rss_bytes", *peaks}};
    std::cout << JsonText(out, 2) << "\n";
  } else {
    std::cout << "loaded " << infos->size() << " tensors (" << HumanBytes(bytes) << ") from "
              << Printable(args.file) << " into " << session->size() << " ranks, mesh "
              << Printable(args.mesh) << ", plan " << Printable(plan->name()) << "\n"
              << "  read: " << ReadModeName(load_stats.read) << " (" << Printable(reason) << ")\n";
    if (all) {
      std::cout << "  every rank read its pieces "
                << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; read amplification";
      for (double a : amplification) std::cout << absl::StrFormat(" %.3f", a);
      std::cout << "\n";
    } else {
      std::cout << "  broadcast " << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; "
                << stats.collectives << " collectives (" << stats.exchanges
                << (stats.exchanges == 1 ? " exchange" : " exchanges") << " of at most "
                << args.bucket_mib << " MiB per rank)\n";
    }
    std::cout << "  verified against " << Printable(against) << ": "
              << (mismatches.empty() ? "every piece matches" : "MISMATCH") << "\n";
    for (const std::string& m : mismatches) std::cout << "    " << Printable(m) << "\n";
    std::cout << "  peak memory per rank:";
    for (int64_t p : *peaks) std::cout << " " << HumanBytes(p);
    std::cout << "\n";
  }
  if (verdict != kExitOk) {  // the whole list is on stdout; here the count and the first
    int64_t pieces = 0;
    for (const std::string& names : *all_wrong) {
      if (!names.empty()) pieces += 1 + std::count(names.begin(), names.end(), ',');
    }
    const std::string& first = mismatches.front();
    WriteStderrLine(Printable(absl::StrCat(
        "sdrt load: ", pieces, " piece(s) on ", mismatches.size(), " rank(s) differ from ", against,
        "; the first: ", Utf8Prefix(first.substr(0, first.find(',')), 500))));
  }
  return verdict;
}

}  // namespace

void AddLoadCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LoadArgs>();
  CLI::App* cmd = app.add_subcommand(
      "load",
      "load a checkpoint into every rank's shards: every rank reads its own bytes, or "
      "rank 0 reads and broadcasts; a sharded folder is resharded (run under mpiexec)");
  cmd->add_option("SRC", args->file,
                  "checkpoint: a safetensors file, a Hugging Face folder, a folder of "
                  "safetensors files, or an sdrt sharded folder in any layout (resharded)")
      ->required();
  cmd->add_option("--mesh", args->mesh, "device mesh shape, e.g. 4 or 2x2")->required();
  cmd->add_option("--plan", args->plan, "fsdp, hsdp, tp, fsdp-tp or PLAN.json")->required();
  cmd->add_option("--verify", args->verify_dir,
                  "sharded checkpoint to compare every piece with (default: every rank "
                  "slices FILE itself, so FILE must be readable on every rank)");
  cmd->add_option("--read", args->read,
                  "who reads SRC: all (every rank its own bytes), root (rank 0, broadcast) or "
                  "auto (all when every rank sees the same files)")
      ->capture_default_str();
  cmd->add_option("--device", args->device, "where the shards go: cpu or cuda")
      ->capture_default_str();
  cmd->add_flag("--direct-io", args->direct_io,
                "with --read all: read with O_DIRECT, bypassing the page cache (cold storage)");
  cmd->add_option("--bucket-mib", args->bucket_mib, "bytes broadcast per collective, MiB")
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "print the results as JSON");
  cmd->add_flag("--progress", args->progress,
                "progress lines on rank 0's stderr even when it is not a terminal (under "
                "mpiexec it never is)");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->callback([args, exit_code] { *exit_code = RunLoad(*args); });
}

}  // namespace sdrt::cli
