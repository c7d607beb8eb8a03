// `sdrt inspect FILE|DIR [--json] [--layout NAME [--mesh M --plan P]] [--map MAP --mesh M
// --plan P]`: what a safetensors checkpoint, a Hugging Face folder, a folder of safetensors
// files or a sharded checkpoint folder holds (internal/inspect_listing.h); with --layout,
// which rank holds which part of one tensor (internal/layout.h); with --map, what each
// tensor of an engine's layout is made of (internal/map_listing.h). A header-only
// description (`sdrt make --header-only`), which every loader refuses, is listed too.
#include <sys/stat.h>

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/inspect_listing.h"
#include "sdrt/tools/sdrt/internal/layout.h"
#include "sdrt/tools/sdrt/internal/map_listing.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

struct InspectArgs {
  std::string path;
  SharedOptions shared;  // --json
  std::string layout;    // a tensor name: print its layout instead of the listing
  std::string mesh;
  std::string plan;
  WeightMapOptions engine;  // --map: what the engine's tensors are made of
};

absl::Status InspectLayout(const InspectArgs& args) {
  absl::StatusOr<FoundLayout> found = FindLayout(args.path, args.layout, args.mesh, args.plan);
  if (!found.ok()) return InputError(found.status());
  if (args.shared.json) {
    absl::StatusOr<nlohmann::ordered_json> json = LayoutJson(found->layout, *found->mesh);
    if (!json.ok()) return json.status();
    std::cout << JsonText(*json, 1) << "\n";
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> text = RenderLayout(found->layout, *found->mesh, found->world_size);
  if (!text.ok()) return text.status();
  std::cout << *text;
  return absl::OkStatus();
}

absl::Status RunInspect(const InspectArgs& args) {
  if (!args.engine.map.empty()) {
    const absl::Status status =
        InspectMap(args.path, args.engine, args.mesh, args.plan, args.shared.json);
    return status.ok() ? status : InputError(status);
  }
  if (!args.engine.cast.empty()) {
    return absl::InvalidArgumentError("--cast goes with --map (the engine's tensors it lists)");
  }
  if (!args.layout.empty()) return InspectLayout(args);
  if (!args.mesh.empty() || !args.plan.empty()) {
    return absl::InvalidArgumentError("--mesh and --plan go with --layout NAME or --map");
  }
  struct stat st;
  if (stat(args.path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InspectSafetensorsFile(args.path, args.shared.json);
  }
  absl::StatusOr<CheckpointKind> kind = DetectCheckpointKind(args.path);
  if (!kind.ok()) return InputError(kind.status());
  return *kind == CheckpointKind::kShardedFolder
             ? InspectShardedCheckpoint(args.path, args.shared.json)
             : InspectFolderSource(args.path, args.shared.json);
}

}  // namespace

void AddInspectCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "List the tensors of a safetensors file (name, dtype, shape, bytes, totals), of a "
      "Hugging Face folder or a folder of safetensors files (also each tensor's file), or of a "
      "sharded checkpoint folder (also placements and each rank's local shape); folders are "
      "validated: their index and every file's header.");
  cmd->add_option("FILE|DIR", args->path,
                  "safetensors file, Hugging Face folder (model.safetensors.index.json), folder "
                  "of safetensors files, or sharded checkpoint folder")
      ->required();
  AddSharedOptions(cmd, kJsonOption, &args->shared);
  cmd->add_option("--layout", args->layout,
                  "show which rank holds which rows and columns of this tensor (a table, and "
                  "a picture for 1-D and 2-D tensors)")
      ->check(CLI::Validator(
          [](const std::string& name) {
            return name.empty() ? std::string("needs a tensor's name, not an empty one")
                                : std::string();
          },
          "NAME"));
  cmd->add_option("--mesh", args->mesh,
                  "with --layout or --map on a checkpoint (not a sharded folder): the device "
                  "mesh, e.g. 4 or 2x2 (with a parallel layout description: the world size)");
  cmd->add_option("--plan", args->plan,
                  "with --layout or --map on a checkpoint: fsdp, hsdp, tp, fsdp-tp, a "
                  "PLAN.json or (--layout) a parallel layout description such as "
                  "megatron:tp=2,pp=2");
  AddWeightMapOptions(cmd, &args->engine);
  cmd->callback([args, exit_code] {
    const absl::Status status = RunInspect(*args);
    *exit_code = status.ok() ? kExitOk : ReportError("inspect", status, /*rank=*/0);
  });
}

}  // namespace sdrt::cli
