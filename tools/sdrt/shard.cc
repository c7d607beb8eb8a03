// `sdrt shard SRC OUTDIR --mesh 2x2 --plan fsdp|hsdp|tp|fsdp-tp|PLAN.json`: cut a full
// checkpoint (a safetensors file, a Hugging Face folder or a folder of safetensors files:
// core/checkpoint/checkpoint_source.h) into a sharded checkpoint folder
// (core/checkpoint/sharded_checkpoint.h), in one process. With --map / --cast the folder holds
// an engine's own layout of it (internal/mapped_shard.h).
#include <sys/stat.h>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/mapped_shard.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/output_path.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {
namespace {

struct ShardArgs {
  std::string source;
  std::string out_dir;
  SharedOptions shared;  // --mesh, --plan, --mesh-dim-names, --overwrite, --json
  WeightMapOptions engine;  // --map, --head-size, --cast
};

int Fail(const absl::Status& status) { return ReportError("shard", status, /*rank=*/0); }

int RunShard(const ShardArgs& args) {
  absl::StatusOr<CheckpointSource> source = CheckpointSource::Open(args.source);
  if (!source.ok()) return Fail(InputError(source.status()));
  absl::StatusOr<MeshAndPlan> layout = ParseMeshAndPlan(args.shared);
  if (!layout.ok()) return Fail(layout.status());
  const absl::Status same_layout = CheckEngineLayout(
      args.source, RecordedEngineLayout(source->metadata()), EngineLayoutText(*layout));
  if (!same_layout.ok()) return Fail(same_layout);
  // OUTDIR is replaced as a whole: it must not be a link or hold SRC or any of its files.
  std::vector<std::string> inputs = {args.source};
  for (const CheckpointSourceFile& f : source->files()) inputs.push_back(f.path);
  const absl::Status out_ok = CheckOutputPath(args.out_dir, inputs);
  if (!out_ok.ok()) return Fail(out_ok);

  absl::StatusOr<ShardedCheckpointIndex> index;
  if (!args.engine.map.empty() || !args.engine.cast.empty()) {
    absl::StatusOr<std::optional<WeightMap>> map = ParseWeightMap(args.engine, args.source, source->TensorSpecs());
    if (!map.ok()) return Fail(map.status());
    index = WriteMappedShards(*source, args.source, *map, args.engine, *layout, args.out_dir,
                              args.shared.overwrite);
  } else {
    WriteShardedCheckpointOptions options;
    options.source_name = args.source;
    options.overwrite = args.shared.overwrite;
    index = WriteShardedCheckpoint(*source, layout->mesh, layout->plan, args.out_dir, options);
  }
  if (!index.ok()) return Fail(index.status());

  std::vector<int64_t> file_sizes;
  for (int64_t r = 0; r < index->world_size; ++r) {
    struct stat st;
    file_sizes.push_back(stat(index->RankFilePath(r).c_str(), &st) == 0 ? st.st_size : -1);
  }
  const DeviceMesh& m = *index->mesh;
  const std::string mesh_text = absl::StrJoin(m.shape(), "x");
  if (args.shared.json) {
    nlohmann::ordered_json files = nlohmann::ordered_json::array();
    for (int64_t r = 0; r < index->world_size; ++r) {
      files.push_back({{"rank", r}, {"file", index->files[r]}, {"file_size", file_sizes[r]}});
    }
    nlohmann::ordered_json out = {
        {"source", args.source},
        {"dir", args.out_dir},
        {"plan", index->plan},
        {"mesh",
         {{"shape", std::vector<int64_t>(m.shape().begin(), m.shape().end())},
          {"dim_names", m.dim_names()}}},
        {"world_size", index->world_size},
        {"tensors", index->tensors.size()},
        {"files", std::move(files)}};
    std::cout << JsonText(out, 1) << "\n";
    return kExitOk;
  }
  std::cout << "wrote " << Printable(args.out_dir) << ": " << index->tensors.size()
            << " tensors of " << Printable(args.source) << ", plan " << Printable(index->plan)
            << " on mesh " << mesh_text;
  if (!m.dim_names().empty()) {
    std::cout << " (" << Printable(absl::StrJoin(m.dim_names(), ", ")) << ")";
  }
  std::cout << ", " << index->world_size << " rank files\n\n";
  Table table({"rank", "file", "bytes"}, {true, false, true});
  for (int64_t r = 0; r < index->world_size; ++r) {
    table.AddRow({std::to_string(r), Printable(index->files[r]), WithThousands(file_sizes[r])});
  }
  table.Print(std::cout);
  return kExitOk;
}

}  // namespace

void AddShardCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<ShardArgs>();
  CLI::App* cmd = app.add_subcommand(
      "shard",
      "Cut a full checkpoint (a safetensors file, a Hugging Face folder with "
      "model.safetensors.index.json, or a folder of safetensors files) into a sharded "
      "checkpoint folder: index.json plus one rank-NNNNN-of-NNNNN.safetensors per rank.");
  cmd->add_option("SRC", args->source,
                  "the full checkpoint: a safetensors file, a Hugging Face folder or a folder of "
                  "safetensors files")
      ->required();
  cmd->add_option("OUTDIR", args->out_dir,
                  "the folder to write (created atomically; must not exist, be empty, or be a "
                  "sharded checkpoint with --overwrite)")
      ->required();
  AddSharedOptions(cmd, kMeshPlanOption | kMeshDimNamesOption | kOverwriteOption | kJsonOption,
                   &args->shared);
  AddWeightMapOptions(cmd, &args->engine);
  cmd->callback([args, exit_code] { *exit_code = RunShard(*args); });
}

}  // namespace sdrt::cli
