#include "sdrt/tools/sdrt/internal/load_sharded.h"

#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/load_setup.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/reshard_target.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {
namespace {

// Every tensor gathered to rank 0 and compared with the index's xxh64 there; the names
// that differ (on rank 0; empty elsewhere).
absl::StatusOr<std::vector<std::string>> CheckAgainstIndex(const ShardedCheckpointIndex& index,
                                                           const Map& local, Session& session,
                                                           int64_t bucket_bytes) {
  GatherOptions options;
  options.comm = &session.data();
  options.ranks_only = {0};
  options.cpu_offload = true;
  options.bucket_bytes = bucket_bytes;
  SDRT_ASSIGN_OR_RETURN(const Map full, GatherStateDict(local, options));
  std::vector<std::string> wrong;
  if (session.rank() != 0) return wrong;
  for (const ShardedCheckpointTensor& t : index.tensors) {
    const Value* v = full.Find(t.name);
    if (v == nullptr || v->kind() != ValueKind::kTensor ||
        !CheckGatheredTensor(index, t, v->as_tensor()).ok()) {
      wrong.push_back(t.name);
    }
  }
  return wrong;
}

std::string Ranks(int64_t n) { return absl::StrCat(n, n == 1 ? " rank" : " ranks"); }

}  // namespace

int LoadShardedFolder(const ShardedLoadArgs& args, Session& session) {
  const int me = session.rank();
  const auto fail = [&](const absl::Status& status) {
    EndJobIfTimedOut("load", status);
    return ReportError("load", status, me);
  };
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(args.dir);
  absl::Status status = source.status();
  const ShardedCheckpointIndex* index = source.ok() ? source->sharded_index() : nullptr;
  if (status.ok() && index == nullptr) {  // replaced since RunLoad looked at it
    status = absl::InvalidArgumentError(absl::StrCat(args.dir, ": no longer a sharded folder"));
  }
  if (me == 0 && status.ok() && !UncheckedPiecesWarning(*index).empty()) {
    WriteStderrLine(
        absl::StrCat("sdrt load: warning: ", Printable(UncheckedPiecesWarning(*index))));
  }
  absl::StatusOr<ShardingPlan> plan = ShardingPlan::FromSpec(args.plan);
  if (status.ok()) status = plan.status();
  absl::StatusOr<ShardedCheckpointIndex> target;
  if (status.ok()) {
    target = TargetIndex(args.mesh, "", *plan, *index);
    status = target.status();
  }
  if (status.ok() && target->world_size != session.size()) {
    status = absl::InvalidArgumentError(absl::StrCat("--mesh ", args.mesh, " has ",
                                                     Ranks(target->world_size),
                                                     " but mpiexec started ", session.size()));
  }
  absl::StatusOr<Map> local = status.ok()
                                  ? plan->MetaStateDict(target->TensorSpecs(), target->mesh, me)
                                  : absl::StatusOr<Map>(Map());
  status = AgreeUnlessTimedOut(session.world(), local.ok() ? status : local.status());
  if (!status.ok()) return fail(status);

  LoadOptions options;
  options.comm = &session.data();
  options.read = args.read;
  options.device = session.device;
  options.direct_io = args.direct_io;
  options.bucket_bytes = args.bucket_mib << 20;
  LoadStats load_stats;
  options.stats = &load_stats;
  status = session.world().Barrier();
  if (!status.ok()) return fail(status);
  const double start = NowSeconds();
  status = LoadStateDict(*source, *local, options).status();
  const double seconds = NowSeconds() - start;
  status = AgreeUnlessTimedOut(session.world(), status);
  if (!status.ok()) return fail(status);
  const int64_t bytes_read = load_stats.bytes_read;
  const int64_t kept = load_stats.bytes_kept;
  const TransferStats& stats = load_stats.transfer;

  absl::StatusOr<std::vector<int64_t>> all_read = AllGatherInt64(session.world(), bytes_read);
  if (!all_read.ok()) return fail(all_read.status());
  absl::StatusOr<std::vector<int64_t>> all_kept = AllGatherInt64(session.world(), kept);
  if (!all_kept.ok()) return fail(all_kept.status());
  // The check: --verify INDIR's rank files, or the folder's own hashes.
  absl::StatusOr<std::vector<std::string>> wrong =
      args.verify_dir.empty()
          ? CheckAgainstIndex(*index, *local, session, options.bucket_bytes)
          : VerifyPieces(args.verify_dir, args.dir, args.mesh, me, *target->mesh, *local);
  status = AgreeUnlessTimedOut(session.world(), wrong.status());
  if (!status.ok()) return fail(status);
  absl::StatusOr<std::vector<std::string>> all_wrong =
      session.world().AllGatherBytes(absl::StrJoin(*wrong, ","));
  if (!all_wrong.ok()) return fail(all_wrong.status());
  absl::StatusOr<std::vector<int64_t>> peaks = AllPeakRssBytes(session.world());
  if (!peaks.ok()) return fail(peaks.status());
  std::vector<std::string> mismatches;
  for (int q = 0; q < session.size(); ++q) {
    if (!(*all_wrong)[q].empty()) {
      mismatches.push_back(absl::StrCat(args.verify_dir.empty() ? "tensors" : "rank ",
                                        args.verify_dir.empty() ? "" : absl::StrCat(q, ": "),
                                        (*all_wrong)[q]));
    }
  }
  // A mismatch means the folder (or INDIR) holds other bytes than its index says: bad input.
  const int verdict = mismatches.empty() ? kExitOk : kExitBadInput;
  if (me != 0) return verdict;

  int64_t bytes = 0;
  for (const ShardedCheckpointTensor& t : index->tensors) {
    bytes += BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0);
  }
  const std::string from_mesh = absl::StrJoin(index->mesh->shape(), "x");
  const std::string against = args.verify_dir.empty()
                                  ? absl::StrCat(args.dir, "'s index (each tensor gathered)")
                                  : args.verify_dir;
  const double gbps = seconds > 0 ? bytes / seconds / 1e9 : 0;
  if (args.json) {
    nlohmann::ordered_json out = {
        {"command", "load"},
        {"file", args.dir},
        {"from", {{"ranks", index->world_size}, {"mesh", from_mesh}, {"plan", index->plan}}},
        {"mesh", args.mesh},
        {"plan", target->plan},
        {"ranks", session.size()},
        {"device", "cpu"},
        {"read", ReadModeName(load_stats.read)},
        {"read_reason", load_stats.read_reason},
        {"tensors", index->tensors.size()},
        {"bytes", bytes},
        {"seconds", seconds},
        {"gbps", gbps},
        {"verified_against", against},
        {"mismatches", mismatches},
        {"bit_exact", mismatches.empty()},
        {"bytes_read", *all_read},
        {"bytes_kept", *all_kept},
        {"peak_rss_bytes", *peaks}};
    out.update(TransferStatsJson(stats));
    std::cout << JsonText(out, 2) << "\n";
  } else {
    std::cout << "loaded " << index->tensors.size() << " tensors (" << HumanBytes(bytes)
              << ") from " << Printable(args.dir) << " (" << Ranks(index->world_size) << ", "
              << Printable(index->plan) << ", mesh " << from_mesh << ") into "
              << Ranks(session.size()) << ", mesh " << Printable(args.mesh) << ", plan "
              << Printable(target->plan) << "\n"
              << "  read: each rank its own rank files; bytes read per rank:";
    for (int64_t b : *all_read) std::cout << " " << HumanBytes(b);
    std::cout << "\n  resharded peer to peer " << absl::StrFormat("%.3f s", seconds) << "; wire "
              << HumanBytes(stats.wire_bytes)
              << " (the optimum: " << HumanBytes(stats.optimum_bytes) << "), kept in place "
              << HumanBytes(stats.self_bytes) << "; " << stats.exchanges
              << (stats.exchanges == 1 ? " exchange, " : " exchanges, ") << stats.collectives
              << " collectives\n"
              << "  verified against " << Printable(against) << ": "
              << (mismatches.empty() ? "every piece matches" : "MISMATCH") << "\n";
    for (const std::string& m : mismatches) std::cout << "    " << Printable(m) << "\n";
    std::cout << "  peak memory per rank:";
    for (int64_t p : *peaks) std::cout << " " << HumanBytes(p);
    std::cout << "\n";
  }
  if (verdict != kExitOk) {
    WriteStderrLine(Printable(absl::StrCat("sdrt load: pieces differ from ", against, "; ",
                                           Utf8Prefix(mismatches.front(), 500))));
  }
  return verdict;
}

}  // namespace sdrt::cli
