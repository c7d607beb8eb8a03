// `mpiexec -n N sdrt reshard INDIR OUTDIR --mesh M --plan P`: turns an sdrt sharded
// checkpoint into another mesh and plan, peer to peer (ReshardStateDict,
// core/distributed/reshard_state_dict.h): each source rank reads only its own rank file,
// each destination rank receives only the bytes of its pieces and writes only its own rank
// file, and rank 0 writes index.json and moves the folder into place (it appears whole).
// N is at least the larger of the two world sizes. OUTDIR holds what `sdrt shard FULL
// OUTDIR --mesh M --plan P` would write, byte for byte.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"
#include "sdrt/tools/sdrt/internal/reshard_target.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {
namespace {

struct ReshardArgs {
  std::string in_dir;
  std::string out_dir;
  std::string mesh;
  std::string dim_names;
  std::string plan;
  int64_t bucket_mib = 256;
  bool overwrite = false;
  bool json = false;
  double timeout_seconds = kDefaultTimeoutSeconds;
};

// "1 rank", "4 ranks".
std::string Ranks(int64_t n) { return absl::StrCat(n, n == 1 ? " rank" : " ranks"); }

int RunReshard(const ReshardArgs& args) {
  absl::StatusOr<Session> session = StartSession("cpu", TimeoutFrom(args.timeout_seconds));
  if (!session.ok()) {
    EndJobIfTimedOut("reshard", session.status());
    return ReportError("reshard", session.status(), LauncherRank());
  }
  const int rank = session->rank();
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("reshard", status);
    return ReportError("reshard", status, rank);
  };
  if (args.bucket_mib < 1 || args.bucket_mib > kMaxBucketMib) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--bucket-mib must be in [1, ", kMaxBucketMib, "], got ", args.bucket_mib)));
  }
  // Every rank reads the source's index; a source rank also its own rank file.
  ReadShardedCheckpointOptions read_options;
  read_options.check_rank_files = false;
  absl::StatusOr<ShardedCheckpointIndex> source_index =
      ReadShardedCheckpointIndex(args.in_dir, read_options);
  absl::Status status = source_index.status();
  if (rank == 0 && status.ok() && !UncheckedPiecesWarning(*source_index).empty()) {
    WriteStderrLine(
        absl::StrCat("sdrt reshard: warning: ", Printable(UncheckedPiecesWarning(*source_index))));
  }
  Map source;
  std::optional<ShardedCheckpointIndex> target;
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(args.plan);
  if (status.ok()) status = plan.status();
  if (status.ok()) {
    absl::StatusOr<ShardedCheckpointIndex> made =
        TargetIndex(args.mesh, args.dim_names, *plan, *source_index);
    status = made.status();
    if (made.ok()) target = *std::move(made);
  }
  if (status.ok()) {
    const int64_t needed = std::max(source_index->world_size, target->world_size);
    if (session->size() < needed) {
      status = absl::InvalidArgumentError(
          absl::StrCat(args.in_dir, " has ", Ranks(source_index->world_size), " and --mesh ",
                       args.mesh, " has ", Ranks(target->world_size), "; mpiexec started ",
                       session->size(), " (run with -n ", needed, ")"));
    }
  }
  if (status.ok() && rank < source_index->world_size) {
    absl::StatusOr<RankShards> shards = LoadRankShards(args.in_dir, rank);
    status = shards.status();
    if (shards.ok()) source = shards->ToStateDict();
  }
  // Rank 0 checks OUTDIR and makes the temporary folder every target rank writes into.
  std::optional<ShardedCheckpointFolder> folder;
  std::string folder_path;
  if (status.ok() && rank == 0) {
    status = CheckOutputPath(args.out_dir, {args.in_dir});
    if (status.ok()) {
      absl::StatusOr<ShardedCheckpointFolder> begun =
          ShardedCheckpointFolder::Begin(*target, args.out_dir, args.in_dir, args.overwrite);
      status = begun.status();
      if (begun.ok()) {
        folder.emplace(*std::move(begun));
        folder_path = folder->path();
      }
    }
  }
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  status = session->world().BroadcastBytes(&folder_path, 0);
  if (!status.ok()) return fail(status);

  absl::StatusOr<Map> destination = plan->MetaStateDict(target->TensorSpecs(), target->mesh, rank);
  status = AgreeUnlessTimedOut(session->world(), destination.status());
  if (!status.ok()) return fail(status);
  ReshardOptions options;
  options.comm = &session->data();
  options.bucket_bytes = args.bucket_mib << 20;
  TransferStats stats;
  status = session->world().Barrier();
  if (!status.ok()) return fail(status);
  const double start = NowSeconds();
  status = ReshardStateDict(source, *destination, options, &stats);
  const double reshard_seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session->world(), status);
  if (!status.ok()) return fail(status);
  source = Map();  // unmap the source rank file

  absl::Status written = absl::OkStatus();
  if (rank < target->world_size) {
    std::vector<std::pair<std::string, Tensor>> locals;
    for (const ShardedCheckpointTensor& t : target->tensors) {
      locals.emplace_back(t.name, destination->Find(t.name)->as_dtensor().local());
    }
    written = WriteShardedRankFile(folder_path, *target, rank, locals);
  }
  status = AgreeUnlessTimedOut(session->world(), written);
  if (!status.ok()) return fail(status);
  if (rank == 0) written = folder->Finish();
  status = AgreeUnlessTimedOut(session->world(), written);
  if (!status.ok()) return fail(status);
  absl::StatusOr<std::vector<int64_t>> peaks = AllPeakRssBytes(session->world());
  if (!peaks.ok()) return fail(peaks.status());
  if (rank != 0) return kExitOk;

  int64_t bytes = 0;
  for (const ShardedCheckpointTensor& t : target->tensors) {
    bytes += BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0);
  }
  const std::string from_mesh = absl::StrJoin(source_index->mesh->shape(), "x");
  const std::string to_mesh = absl::StrJoin(target->mesh->shape(), "x");
  if (args.json) {
    nlohmann::ordered_json out = {{"command", "reshard"},
                                  {"in_dir", args.in_dir},
                                  {"out_dir", args.out_dir},
                                  {"ranks", session->size()},
                                  {"from", {{"mesh", from_mesh}, {"plan", source_index->plan}}},
                                  {"to", {{"mesh", to_mesh}, {"plan", target->plan}}},
                                  {"tensors", target->tensors.size()},
                                  {"bytes", bytes},
                                  {"reshard_seconds", reshard_seconds},
                                  {"peak_rss_bytes", *peaks}};
    out.update(TransferStatsJson(stats));
    std::cout << JsonText(out, 2) << "\n";
    return kExitOk;
  }
  std::cout << "resharded " << target->tensors.size() << " tensors (" << HumanBytes(bytes)
            << ") of " << Printable(args.in_dir) << " from " << Ranks(source_index->world_size)
            << " (" << Printable(source_index->plan) << ", mesh " << from_mesh << ") to "
            << Ranks(target->world_size) << " (" << Printable(target->plan) << ", mesh " << to_mesh
            << ") into " << Printable(args.out_dir) << "\n"
            << "  " << absl::StrFormat("%.3f s", reshard_seconds) << "; wire "
            << HumanBytes(stats.wire_bytes) << " (the optimum: " << HumanBytes(stats.optimum_bytes)
            << "), kept in place " << HumanBytes(stats.self_bytes) << "; the busiest rank sent "
            << HumanBytes(stats.max_sent_bytes) << " and received "
            << HumanBytes(stats.max_received_bytes) << "; " << stats.exchanges
            << (stats.exchanges == 1 ? " exchange, " : " exchanges, ") << stats.collectives
            << " collectives\n"
            << "  peak memory per rank:";
  for (int64_t p : *peaks) std::cout << " " << HumanBytes(p);
  std::cout << "\n";
  return kExitOk;
}

}  // namespace

void AddReshardCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ReshardArgs>();
  CLI::App* cmd = app.add_subcommand(
      "reshard",
      "turn a sharded checkpoint into another mesh and plan, peer to peer (run under mpiexec -n "
      "the larger world size)");
  cmd->add_option("INDIR", args->in_dir, "sharded checkpoint folder (sdrt shard)")->required();
  cmd->add_option("OUTDIR", args->out_dir,
                  "the folder to write (created atomically; must not exist, be empty, or be a "
                  "sharded checkpoint with --overwrite)")
      ->required();
  cmd->add_option("--mesh", args->mesh, "target mesh shape over ranks 0..N-1: 4, 2x2")->required();
  cmd->add_option("--plan", args->plan, "fsdp, hsdp, tp, fsdp-tp or a PLAN.json file (as shard)")
      ->required();
  cmd->add_option("--mesh-dim-names", args->dim_names,
                  "comma-separated mesh dim names recorded in the index, e.g. dp,tp");
  cmd->add_option("--bucket-mib", args->bucket_mib,
                  "the most bytes a rank sends, or receives, per exchange, MiB")
      ->capture_default_str();
  cmd->add_flag("--overwrite", args->overwrite, "replace OUTDIR when it is a sharded checkpoint");
  cmd->add_flag("--json", args->json, "print the results as JSON");
  AddTimeoutOption(cmd, &args->timeout_seconds);
  cmd->callback([args, exit_code] { *exit_code = RunReshard(*args); });
}

}  // namespace sdrt::cli
