// `mpiexec -n N sdrt load SRC --mesh 2x2 --plan P [--read auto|all|root] [--verify INDIR]
// [--device cpu|cuda]`: what an inference engine does at start-up. SRC is a safetensors
// file, a Hugging Face folder or a folder of safetensors files (CheckpointSource). Rank 0
// maps SRC's files (pinned when it broadcasts to GPUs; pageable, with a one-line warning,
// when the mapping cannot be registered) and sends the other ranks its tensor list; every rank makes
// meta DTensors with the plan's placements, which BroadcastStateDict (--read root) or, on
// every rank from its own view of SRC, LoadStateDict (--read all) fills (read_mode.h says
// what auto picks); every rank checks its pieces by
// xxh64 against INDIR's rank file (or against its own slicing of FILE without --verify).
// Rank 0 prints bytes moved, time, GB/s, collectives and peak memory per rank. SRC may also
// be an sdrt sharded folder in another layout: then the ranks reshard its rank files
// (internal/load_sharded.h).
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/load_setup.h"
#include "sdrt/tools/sdrt/internal/load_sharded.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/read_mode.h"
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
  if (absl::StatusOr<CheckpointKind> kind = DetectCheckpointKind(args.file);
      kind.ok() && *kind == CheckpointKind::kShardedFolder) {
    return LoadShardedFolder({args.file, args.mesh, args.plan, args.verify_dir, args.read,
                              args.bucket_mib, args.json},
                             *session);
  }
  // Rank 0 maps the file; every rank checks the mesh and the plan.
  absl::Status status =
      args.bucket_mib >= 1 && args.bucket_mib <= kMaxBucketMib
          ? absl::OkStatus()
          : absl::InvalidArgumentError(absl::StrCat("--bucket-mib must be in [1, ", kMaxBucketMib,
                                                    "], got ", args.bucket_mib));
  if (status.ok() && args.direct_io && args.read == "root") {
    status = absl::InvalidArgumentError("--direct-io goes with --read all (or auto)");
  }
  std::optional<CheckpointSource> file;
  // Only a broadcast to GPUs copies out of rank 0's mapping; --read all never maps.
  if (status.ok() && session->rank() == 0) {
    status = OpenOnRoot(args.file, session->device,
                        session->device.is_cuda() && args.read == "root", file);
  }
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
  // Which ranks read SRC; with `all`, every other rank opens it too.
  absl::StatusOr<ReadChoice> read = ChooseRead(session->world(), args.file, args.read);
  if (read.ok() && !read->all && args.direct_io) {
    absl::StrAppend(&read->reason, "; --direct-io unused (it is for --read all)");
  }
  if (read.ok() && read->all && session->rank() != 0) {
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(args.file);
    if (opened.ok()) file = *std::move(opened);
    status = opened.status();
  }
  if (read.ok() && !read->all && session->device.is_cuda() && args.read != "root" &&
      session->rank() == 0) {
    status = OpenOnRoot(args.file, session->device, /*pinned=*/true, file);  // auto: broadcast
  }
  status = AgreeUnlessTimedOut(session->world(), read.ok() ? status : read.status());
  if (!status.ok()) return fail(status);

  absl::StatusOr<std::vector<SafetensorsTensorSpec>> infos =
      ShareTensorList(*session, file.has_value() ? &*file : nullptr);
  if (!infos.ok()) return fail(infos.status());
  auto shared_mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
  absl::StatusOr<Map> local = plan->MetaStateDict(*infos, shared_mesh, session->rank());
  Map full;
  if (file.has_value() && !read->all && session->rank() == 0) {
    for (const CheckpointSourceTensor& e : file->tensors()) {
      absl::StatusOr<Tensor> t = file->Get(e.name);
      if (!t.ok()) {
        status = t.status();
        break;
      }
      full.Set(e.name, Value(*std::move(t)));
    }
  }
  status = AgreeUnlessTimedOut(session->world(), local.ok() ? status : local.status());
  if (!status.ok()) return fail(status);

  BroadcastOptions options;
  options.comm = &session->data();
  options.device = session->device;
  options.bucket_bytes = args.bucket_mib << 20;
  options.strict = true;
  CollectiveStats stats;
  options.stats = &stats;
  options.progress =
      ProgressLine("load", session->rank() == 0 && (!args.json || args.progress), args.progress);
  status = session->world().Barrier();
  if (!status.ok()) return fail(status);
  LoadStats load_stats;
  const double start = NowSeconds();
  if (read->all) {
    LoadOptions load_options;
    load_options.comm = &session->data();
    load_options.device = session->device;
    load_options.direct_io = args.direct_io;
    load_options.strict = true;
    load_options.stats = &load_stats;
    load_options.progress = options.progress;
    status = LoadStateDict(*file, *local, load_options).status();
  } else {
    status = BroadcastStateDict(full, *local, options).status();
  }
  const double seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  if (!read->all) {  // rank 0 read everything (its mapping); every rank kept its pieces
    if (session->rank() == 0) load_stats.bytes_read = file->total_bytes();
    for (size_t i = 0; i < local->size(); ++i) {
      const Value& v = local->value(i);
      const Tensor& t = v.kind() == ValueKind::kDTensor ? v.as_dtensor().local() : v.as_tensor();
      load_stats.bytes_kept += t.nbytes();
    }
  }
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
                                  {"read", read->all ? "all" : "root"},
                                  {"read_reason", read->reason},
                                  {"tensors", infos->size()},
                                  {"bytes", bytes},
                                  {"seconds", seconds},
                                  {"gbps", gbps},
                                  {"collectives", stats.collectives},
                                  {"data_collectives", stats.data_collectives},
                                  {"buckets", stats.buckets},
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
              << "  read: " << (read->all ? "all" : "root") << " (" << Printable(read->reason)
              << ")\n";
    if (read->all) {
      std::cout << "  every rank read its pieces "
                << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; read amplification";
      for (double a : amplification) std::cout << absl::StrFormat(" %.3f", a);
      std::cout << "\n";
    } else {
      std::cout << "  broadcast " << absl::StrFormat("%.3f s, %.2f GB/s", seconds, gbps) << "; "
                << stats.collectives << " collectives (" << stats.data_collectives
                << " moving data, " << stats.buckets << " buckets of at most " << args.bucket_mib
                << " MiB)\n";
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
