// `mpiexec -n N sdrt gather INDIR OUT [--max-shard-size 5GB] [--device cpu|cuda]
// [--bucket-mib 256]`: every rank loads its file of a sharded checkpoint as DTensors,
// GatherStateDict gathers them with ranks_only {0} and cpu_offload, and rank 0 checks each
// full tensor against the index's xxh64 and writes OUT atomically: one safetensors file, or
// when OUT ends in '/' or is a folder, a Hugging Face folder (WriteHfCheckpoint) of files
// of at most --max-shard-size bytes; the source's tensors in its order, with its
// __metadata__ (internal/gather_files.h). The run is the runner's (internal/runner.h).
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/gather_files.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/runner.h"

namespace sdrt::cli {
namespace {

struct GatherArgs {
  GatherTarget target{"", "", false, 5'000'000'000, false};
  SharedOptions shared;
};

absl::StatusOr<Report> Gather(const GatherArgs& args, Runner& run) {
  const GatherTarget& target = args.target;
  ShardedCheckpointIndex index;
  Map shards;
  std::optional<HfShardPlan> plan;  // rank 0's, for a folder OUT
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(shards, ReadRankShards(target.in_dir, run.session(), &index));
    return run.rank() == 0 ? PlanOut(target, index, &plan) : absl::OkStatus();
  }));
  GatherOptions options;
  options.comm = &run.data();
  options.cpu_offload = true;
  options.ranks_only = {0};
  options.bucket_bytes = args.shared.bucket_bytes();
  TransferStats stats;
  options.stats = &stats;
  options.progress = run.Progress();
  absl::StatusOr<Map> gathered;
  SDRT_ASSIGN_OR_RETURN(const double gather_seconds, run.TimedCollective([&] {
    gathered = GatherStateDict(shards, options);
    return gathered.status();
  }));
  shards = Map();  // unmap early
  SDRT_ASSIGN_OR_RETURN(const double write_seconds, run.TimedStep([&] {
    return run.rank() == 0 ? CheckAndWrite(target, index, *gathered, plan ? &*plan : nullptr)
                           : absl::OkStatus();
  }));

  const std::vector<int64_t> nbytes = TensorBytes(index);
  const int64_t bytes = std::accumulate(nbytes.begin(), nbytes.end(), int64_t{0});
  const double gbps = gather_seconds > 0 ? bytes / gather_seconds / 1e9 : 0;
  Report report;
  report.json = {{"command", "gather"},
                 {"in_dir", target.in_dir},
                 {"out", target.out},
                 {"ranks", run.size()},
                 {"device", args.shared.device},
                 {"tensors", index.tensors.size()},
                 {"bytes", bytes},
                 {"gather_seconds", gather_seconds},
                 {"gather_gbps", gbps},
                 {"write_seconds", write_seconds},
                 {"collectives", stats.collectives},
                 {"exchanges", stats.exchanges},
                 {"buffer_bytes", stats.buffer_bytes},
                 {"verified", true}};
  report.json["layout"] = plan ? "huggingface" : "safetensors";
  if (plan) {
    report.json["max_shard_bytes"] = target.max_shard_bytes;
    report.json["files"] = plan->files;
  }
  report.text = absl::StrCat(
      "gathered ", Counted(static_cast<int64_t>(index.tensors.size()), "tensor"), " (",
      HumanBytes(bytes), ") from ", Ranks(run.size()), " into ", Printable(target.out),
      "\n  gather ",
      absl::StrFormat("%.3f s, %.2f GB/s", gather_seconds, gbps), "; ", stats.collectives,
      " collectives (", stats.exchanges, stats.exchanges == 1 ? " exchange" : " exchanges",
      " moving data, buffers ", HumanBytes(stats.buffer_bytes), "); write ",
      absl::StrFormat("%.3f s", write_seconds), "\n  every tensor matches the index's xxh64\n");
  if (plan) {
    absl::StrAppend(&report.text, "  Hugging Face folder: ",
                    DescribeFolder(*plan, target.max_shard_bytes, nbytes), "\n");
  }
  return report;
}

}  // namespace

void AddGatherCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<GatherArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gather",
      "gather a sharded checkpoint into one safetensors file or a Hugging Face folder (run under "
      "mpiexec -n WORLD_SIZE)");
  cmd->add_option("INDIR", args->target.in_dir, "sharded checkpoint folder (sdrt shard)")
      ->required();
  cmd->add_option("OUT", args->target.out,
                  "safetensors file to write, or a Hugging Face folder when OUT ends in / or is "
                  "a folder (rank 0; atomic)")
      ->required();
  CLI::Option* max_shard_size =
      cmd->add_option("--max-shard-size", args->target.max_shard_bytes,
                      "most tensor bytes per file of a folder OUT: 500MB, 2GiB, 5GB or bytes "
                      "(a larger tensor is alone in its file)")
          ->transform(CLI::Validator(
              [](std::string& text) {
                const absl::StatusOr<int64_t> bytes = ParseMaxShardSize(text);
                if (!bytes.ok()) return std::string(bytes.status().message());
                text = absl::StrCat(*bytes);
                return std::string();
              },
              "SIZE"))
          ->default_str("5GB");
  AddSharedOptions(cmd,
                   kDeviceOption | kBucketMibOption | kOverwriteOption | kJsonOption |
                       kProgressOption | kTimeoutOption,
                   &args->shared);
  cmd->callback([args, exit_code, max_shard_size] {
    args->target.max_shard_size_given = max_shard_size->count() > 0;
    args->target.overwrite = args->shared.overwrite;
    *exit_code =
        RunOnRanks("gather", args->shared, [&](Runner& run) { return Gather(*args, run); });
  });
}

}  // namespace sdrt::cli
