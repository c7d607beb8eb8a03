// `mpiexec -n N sdrt reshard INDIR OUTDIR --mesh M --plan P`: turns an sdrt sharded
// checkpoint into another mesh and plan, peer to peer (ReshardStateDict,
// core/distributed/reshard_state_dict.h): each source rank reads only its own rank file,
// each destination rank receives only the bytes of its pieces and writes only its own rank
// file, and rank 0 writes index.json and moves the folder into place (it appears whole).
// N is at least the larger of the two world sizes. OUTDIR holds what `sdrt shard FULL
// OUTDIR --mesh M --plan P` would write, byte for byte. With --map / --cast the new folder
// holds an engine's layout (what `sdrt shard --map` writes): the map is the reshard's, and
// the index's full hashes of the tensors it makes anew are made as internal/made_hashes.h
// says. The run is the runner's (internal/runner.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/checkpoint/internal/checkpoint_target.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/made_hashes.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"
#include "sdrt/tools/sdrt/internal/runner.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {
namespace {

struct ReshardArgs {
  std::string in_dir;
  std::string out_dir;
  SharedOptions shared;
  WeightMapOptions engine;  // --map, --head-size, --cast
};

absl::StatusOr<Report> Reshard(const ReshardArgs& args, Runner& run) {
  const int rank = run.rank();
  ShardedCheckpointIndex source_index;
  EngineIndex engine;
  std::optional<WeightMap> map;
  std::optional<MeshAndPlan> layout;
  Map source, destination;
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    ReadShardedCheckpointOptions read_options;
    read_options.check_rank_files = false;  // a source rank checks its own below
    SDRT_ASSIGN_OR_RETURN(source_index, ReadShardedCheckpointIndex(args.in_dir, read_options));
    if (rank == 0 && !UncheckedPiecesWarning(source_index).empty()) {
      WriteStderrLine(
          absl::StrCat("sdrt reshard: warning: ", Printable(UncheckedPiecesWarning(source_index))));
    }
    SDRT_ASSIGN_OR_RETURN(layout, ParseMeshAndPlan(args.shared));
    SDRT_RETURN_IF_ERROR(CheckEngineLayout(args.in_dir, RecordedEngineLayout(source_index.metadata),
                                           EngineLayoutText(*layout)));
    SDRT_ASSIGN_OR_RETURN(map, ParseWeightMap(args.engine, args.in_dir, source_index.TensorSpecs()));
    SDRT_ASSIGN_OR_RETURN(engine, MakeEngineIndex(args.shared.mesh, source_index.TensorSpecs(),
                                                  source_index.metadata, map, args.engine,
                                                  *layout));
    const int64_t needed = std::max(source_index.world_size, engine.index.world_size);
    if (run.size() < needed) {
      return absl::InvalidArgumentError(
          absl::StrCat(args.in_dir, " has ", Ranks(source_index.world_size), " and --mesh ",
                       args.shared.mesh, " has ", Ranks(engine.index.world_size),
                       "; mpiexec started ", run.size(), " (run with -n ", needed, ")"));
    }
    // The tensors that keep the source's bytes keep its hashes.
    const auto source_tensors = source_index.ByName();
    for (const EngineIndex::Group& g : engine.groups) {
      for (size_t i : g.members) {
        ShardedCheckpointTensor& t = engine.index.tensors[i];
        if (g.as_in_source) t.xxh64 = source_tensors.at(t.name)->xxh64;
      }
    }
    if (rank < source_index.world_size) {
      SDRT_ASSIGN_OR_RETURN(const RankShards shards, LoadRankShards(args.in_dir, rank));
      source = shards.ToStateDict();
    }
    if (rank < engine.index.world_size) {
      SDRT_ASSIGN_OR_RETURN(destination, EngineLayout(engine, args.engine, *layout, rank));
    }
    if (rank != 0) return absl::OkStatus();
    SDRT_RETURN_IF_ERROR(CheckOutputPath(args.out_dir, {args.in_dir}));
    // OUTDIR may be written (absent, empty, or a sharded checkpoint with --overwrite): known
    // before any byte moves, not after the reshard.
    return sdrt::internal::PrepareCheckpointTarget(args.out_dir, args.shared.overwrite).status();
  }));

  ReshardOptions options;
  options.comm = &run.data();
  options.bucket_bytes = args.shared.bucket_bytes();
  if (map.has_value()) options.weight_map = *map;
  options.progress = run.Progress();
  TransferStats stats;
  SDRT_ASSIGN_OR_RETURN(const double seconds, run.TimedCollective([&] {
    return ReshardStateDict(source, destination, options, &stats);
  }));
  source = Map();  // unmap the source rank file
  SDRT_RETURN_IF_ERROR(HashMadeTensors(engine, destination, run, args.shared.bucket_bytes()));
  const ShardedCheckpointIndex& target = engine.index;
  std::optional<ShardedCheckpointFolder> folder;  // rank 0's, which every target rank fills
  std::string folder_path;
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    if (rank != 0) return absl::OkStatus();
    absl::StatusOr<ShardedCheckpointFolder> begun =
        ShardedCheckpointFolder::Begin(target, args.out_dir, args.in_dir, args.shared.overwrite);
    if (!begun.ok()) return begun.status();
    folder_path = folder.emplace(*std::move(begun)).path();
    return absl::OkStatus();
  }));
  SDRT_RETURN_IF_ERROR(run.ShareFromRankZero(&folder_path));
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    if (rank >= target.world_size) return absl::OkStatus();
    std::vector<std::pair<std::string, Tensor>> locals;
    for (const ShardedCheckpointTensor& t : target.tensors) {
      locals.emplace_back(t.name, destination.Find(t.name)->as_dtensor().local());
    }
    return WriteShardedRankFile(folder_path, target, rank, locals);
  }));
  SDRT_RETURN_IF_ERROR(run.Step([&] { return rank == 0 ? folder->Finish() : absl::OkStatus(); }));

  int64_t bytes = 0;
  for (const ShardedCheckpointTensor& t : target.tensors) {
    bytes += BytesForElements(t.dtype, *CheckedNumel(t.shape)).value_or(0);
  }
  const std::string from_mesh = absl::StrJoin(source_index.mesh->shape(), "x");
  const std::string to_mesh = absl::StrJoin(target.mesh->shape(), "x");
  Report report;
  report.json = {{"command", "reshard"},
                 {"in_dir", args.in_dir},
                 {"out_dir", args.out_dir},
                 {"ranks", run.size()},
                 {"from", {{"mesh", from_mesh}, {"plan", source_index.plan}}},
                 {"to", {{"mesh", to_mesh}, {"plan", target.plan}}},
                 {"tensors", target.tensors.size()},
                 {"bytes", bytes},
                 {"reshard_seconds", seconds}};
  report.json.update(TransferStatsJson(stats));
  report.text = absl::StrCat(
      "resharded ", Counted(static_cast<int64_t>(target.tensors.size()), "tensor"), " (",
      HumanBytes(bytes), ") of ",
      Printable(args.in_dir), " from ", Ranks(source_index.world_size), " (",
      Printable(source_index.plan), ", mesh ", from_mesh, ") to ", Ranks(target.world_size), " (",
      Printable(target.plan), ", mesh ", to_mesh, ") into ", Printable(args.out_dir), "\n  ",
      absl::StrFormat("%.3f s", seconds), "; wire ", HumanBytes(stats.wire_bytes),
      " (the optimum: ", HumanBytes(stats.optimum_bytes), "), kept in place ",
      HumanBytes(stats.self_bytes), "; the busiest rank sent ", HumanBytes(stats.max_sent_bytes),
      " and received ", HumanBytes(stats.max_received_bytes), "; ", WithThousands(stats.exchanges),
      stats.exchanges == 1 ? " exchange, " : " exchanges, ", WithThousands(stats.collectives),
      " collectives\n");
  return report;
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
  AddSharedOptions(cmd,
                   kMeshPlanOption | kMeshDimNamesOption | kBucketMibOption | kOverwriteOption |
                       kJsonOption | kProgressOption | kTimeoutOption,
                   &args->shared);
  AddWeightMapOptions(cmd, &args->engine);
  cmd->callback([args, exit_code] {
    *exit_code =
        RunOnRanks("reshard", args->shared, [&](Runner& run) { return Reshard(*args, run); });
  });
}

}  // namespace sdrt::cli
