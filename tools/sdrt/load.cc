// `mpiexec -n N sdrt load SRC --mesh 2x2 --plan P [--read auto|all|root] [--verify INDIR]
// [--device cpu|cuda] [--map MAP [--head-size N]] [--cast bf16|f16|f32|fp8-block|fp8-tensor]`: what an inference
// engine does at start-up, into its own layout with --map (internal/weight_map_option.h). SRC is any checkpoint
// CheckpointSource opens: a safetensors file, a Hugging Face folder, a folder of safetensors
// files or an sdrt sharded folder in any layout. Rank 0 opens SRC and sends the other ranks
// its outline (the tensor list); every rank makes meta DTensors with the plan's placements
// (ShardingPlan::MetaStateDict) or, for a parallel layout description (--plan
// megatron:tp=2,pp=2 and --mesh the world size), those of the tensors its stage or experts
// hold (ParallelLayout::MetaStateDict), which LoadStateDict fills, reading as --read says (the
// library's ReadMode; a sharded folder is resharded from its rank files). Every rank then
// checks its pieces (internal/load_setup.h) and rank 0 prints the summary
// (internal/load_report.h). The run is the runner's (internal/runner.h).
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/load_report.h"
#include "sdrt/tools/sdrt/internal/load_setup.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/runner.h"
#include "sdrt/tools/sdrt/internal/weight_map_option.h"

namespace sdrt::cli {
namespace {

// A parallel layout description as --plan: what it takes of `sdrt load`'s options. Each
// tensor lives on its own stage's or expert's ranks, so every rank reads its own bytes
// alone, or a sharded SRC's pieces are resharded into the stages' layouts (no broadcast
// from rank 0 and no sharing within a node, which need every tensor on every rank's mesh).
absl::Status CheckParallelLayoutLoad(const SharedOptions& o, const std::string& verify_dir) {
  const auto refused = [&o](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("--plan ", o.plan, " (a parallel layout description) goes without ", what,
                     ": every rank reads its own bytes of SRC's tensors"));
  };
  if (o.read_mode() == ReadMode::kRoot) return refused("--read root");
  if (o.read_once_per_node) return refused("--read-once-per-node");
  if (!verify_dir.empty()) return refused("--verify (a sharded folder holds one mesh)");
  return absl::OkStatus();
}

// A sharded SRC: every rank maps its own rank files, which neither a root's broadcast nor
// O_DIRECT reads apply to.
absl::Status CheckShardedLoad(const SharedOptions& o) {
  if (o.read_mode() == ReadMode::kRoot) {
    return absl::InvalidArgumentError(
        "--read root does not apply to an sdrt sharded folder: every rank reads its own rank "
        "files (leave --read out)");
  }
  if (o.direct_io) {
    return absl::InvalidArgumentError(
        "--direct-io does not apply to an sdrt sharded folder: its rank files are mapped");
  }
  return absl::OkStatus();
}

struct LoadArgs {
  std::string src;
  std::string verify_dir;
  SharedOptions shared;
  WeightMapOptions engine;  // --map, --head-size, --cast
};

absl::StatusOr<Report> Load(const LoadArgs& args, Runner& run) {
  const SharedOptions& o = args.shared;
  // Every rank opens SRC, but only rank 0 with --read root (no other rank's is read).
  absl::StatusOr<CheckpointSource> source =
      absl::FailedPreconditionError("not opened off rank 0 (--read root)");
  if (run.rank() == 0 || o.read_mode() != ReadMode::kRoot) {
    source = CheckpointSource::Open(args.src);
    if (!source.ok()) source = InputError(source.status());
  }
  std::string outline_bytes;
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    if (run.rank() != 0) return absl::OkStatus();
    SDRT_RETURN_IF_ERROR(source.status());
    outline_bytes = EncodeOutline(*source);
    const ShardedCheckpointIndex* index = source->sharded_index();
    if (index != nullptr && !UncheckedPiecesWarning(*index).empty()) {
      WriteStderrLine(
          absl::StrCat("sdrt load: warning: ", Printable(UncheckedPiecesWarning(*index))));
    }
    return absl::OkStatus();
  }));
  SDRT_RETURN_IF_ERROR(run.ShareFromRankZero(&outline_bytes));
  SourceOutline outline;
  std::optional<MeshAndPlan> layout;
  std::optional<ParallelLayout> parallel;  // --plan as a parallel layout description
  std::optional<WeightMap> map;
  std::vector<SafetensorsTensorSpec> tensors;  // the engine's (every rank's), of SRC's list
  Map local;
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(outline, DecodeOutline(outline_bytes));
    if (outline.sharded) SDRT_RETURN_IF_ERROR(CheckShardedLoad(o));
    if (ParallelLayout::IsDescription(o.plan)) {
      SDRT_RETURN_IF_ERROR(CheckParallelLayoutLoad(o, args.verify_dir));
      // --mesh, when given, is the world size: mpiexec's by default.
      SDRT_ASSIGN_OR_RETURN(parallel,
                            ParseParallelLayout(o.mesh.empty() ? std::to_string(run.size()) : o.mesh,
                                                o.plan));
      if (parallel->world_size() != run.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--plan ", parallel->ToString(), " has ",
                                                       Ranks(parallel->world_size()),
                                                       " but mpiexec started ", run.size()));
      }
    } else {
      if (o.mesh.empty()) {
        return absl::InvalidArgumentError(
            "--mesh is required (see `sdrt load --help`) unless --plan is a parallel layout "
            "description");
      }
      SDRT_ASSIGN_OR_RETURN(layout, ParseMeshAndPlan(o));
      if (layout->mesh->num_ranks() != run.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--mesh ", o.mesh, " has ",
                                                       Ranks(layout->mesh->num_ranks()),
                                                       " but mpiexec started ", run.size()));
      }
    }
    SDRT_RETURN_IF_ERROR(CheckEngineLayout(
        args.src, outline.engine_layout,
        layout.has_value() ? EngineLayoutText(*layout) : "--plan " + parallel->ToString()));
    // The engine's tensors: SRC's, or what --map and --cast make of them (each rank lowers
    // the engine's layout from SRC's tensor list, rank 0's with --read root), and no slice
    // of SRC is the engine's piece to verify against.
    const bool engine = !args.engine.map.empty() || !args.engine.cast.empty();
    if (engine && !args.verify_dir.empty()) {
      return absl::InvalidArgumentError(
          "--verify goes without --map and --cast (the engine's pieces are not SRC's)");
    }
    SDRT_ASSIGN_OR_RETURN(map, ParseWeightMap(args.engine, args.src, outline.tensors));
    if (parallel.has_value()) {
      SDRT_ASSIGN_OR_RETURN(tensors, EngineTensors(map, args.engine, outline.tensors, *parallel));
      SDRT_ASSIGN_OR_RETURN(local, parallel->MetaStateDict(tensors, run.rank()));
    } else {
      SDRT_ASSIGN_OR_RETURN(tensors, EngineTensors(map, args.engine, outline.tensors,
                                                   layout->plan, *layout->mesh));
      SDRT_ASSIGN_OR_RETURN(local, layout->plan.MetaStateDict(tensors, layout->mesh, run.rank()));
    }
    return AddScaleLeaves(args.engine, run.rank(), local);
  }));

  LoadFacts facts;
  facts.src = args.src;
  facts.mesh = parallel.has_value() ? std::to_string(parallel->world_size()) : o.mesh;
  facts.plan = parallel.has_value() ? parallel->ToString() : layout->plan.name();
  facts.device = o.device;
  facts.read = parallel.has_value() && o.read_mode() == ReadMode::kAuto
                   ? "auto, which is all with a parallel layout description"
                   : o.read;
  facts.options_read_once_per_node = o.read_once_per_node;
  facts.options_map_results = o.map_results;
  facts.options_readers = o.readers;
  facts.bucket_mib = o.bucket_mib;
  facts.ranks = run.size();
  facts.outline = &outline;
  LoadOptions options;
  options.comm = &run.data();
  // With a layout description --read auto can only mean every rank reading.
  options.read = parallel.has_value() ? ReadMode::kAll : o.read_mode();
  options.device = run.session().device;
  options.direct_io = o.direct_io;
  options.share_reads = o.read_once_per_node;
  options.map_results = o.map_results;
  options.readers = o.readers;
  options.bucket_bytes = o.bucket_bytes();
  options.strict = true;
  options.stats = &facts.stats;
  options.progress = run.Progress();
  if (map.has_value()) options.weight_map = *map;
  SDRT_ASSIGN_OR_RETURN(facts.seconds, run.TimedCollective([&] {
    return LoadStateDict(source, local, options).status();
  }));
  SDRT_ASSIGN_OR_RETURN(facts.bytes_read, run.AllGather(facts.stats.bytes_read));
  SDRT_ASSIGN_OR_RETURN(facts.bytes_kept, run.AllGather(facts.stats.bytes_kept));
  SDRT_ASSIGN_OR_RETURN(facts.bytes_from_node, run.AllGather(facts.stats.bytes_from_node));
  SDRT_ASSIGN_OR_RETURN(facts.node, run.AllGather(int64_t{facts.stats.node}));
  SDRT_ASSIGN_OR_RETURN(facts.bytes_mapped, run.AllGather(facts.stats.bytes_mapped));

  facts.verify_dir = args.verify_dir;
  // Where only rank 0 is sure to see SRC (read by the root), rank 0 checks every tensor.
  facts.gathered = args.verify_dir.empty() && !parallel.has_value() &&
                   (outline.sharded || facts.stats.read == ReadMode::kRoot);
  // Under a description a tensor lives on its stage's ranks, which the gather does not take.
  facts.whole_on_each_rank = parallel.has_value() && outline.sharded;
  if (!args.engine.map.empty() || !args.engine.cast.empty()) {
    // The pieces are SRC's tensors made into others: no slice of SRC to compare them with.
    // Every rank's: the list, and the scale each FP8 weight gets beside it (AddScaleLeaves).
    facts.engine_tensors = static_cast<int64_t>(tensors.size());
    if (absl::StartsWith(args.engine.cast, "fp8")) {
      facts.engine_tensors += std::count_if(tensors.begin(), tensors.end(), [](const auto& t) {
        return t.dtype == DType::kFloat8E4M3FN;
      });
    }
    facts.unchecked = absl::StrCat(!args.engine.map.empty() ? "--map" : "--cast",
                                   " changes the tensors (the layouts are held to PyTorch's by "
                                   "sdrt's tests)");
    return LoadReport(facts);
  }
  const LoadCheck check{args.verify_dir,
                        args.src,
                        o.mesh,
                        layout.has_value() ? layout->mesh.get() : nullptr,
                        run.rank(),
                        facts.gathered,
                        facts.whole_on_each_rank,
                        source.ok() ? &*source : nullptr,
                        &run.data(),
                        options.bucket_bytes};
  std::vector<std::string> wrong;
  SDRT_RETURN_IF_ERROR(run.Step([&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(wrong, CheckLoaded(check, local));
    return absl::OkStatus();
  }));
  SDRT_ASSIGN_OR_RETURN(facts.wrong, run.AllGather(absl::StrJoin(wrong, ",")));
  return LoadReport(facts);
}

}  // namespace

void AddLoadCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<LoadArgs>();
  CLI::App* cmd = app.add_subcommand(
      "load",
      "load a checkpoint into every rank's shards: every rank reads its own bytes, or "
      "rank 0 reads and broadcasts; a sharded folder is resharded (run under mpiexec)");
  cmd->add_option("SRC", args->src,
                  "checkpoint: a safetensors file, a Hugging Face folder, a folder of "
                  "safetensors files, or an sdrt sharded folder in any layout (resharded)")
      ->required();
  cmd->add_option("--verify", args->verify_dir,
                  "sharded checkpoint to compare every piece with (default: every rank "
                  "slices SRC itself, so SRC must be readable on every rank; a sharded SRC "
                  "is gathered to rank 0 and checked against its index)");
  AddSharedOptions(cmd,
                   kMeshPlanOption | kReadOption | kDeviceOption | kBucketMibOption | kJsonOption |
                       kProgressOption | kTimeoutOption,
                   &args->shared);
  cmd->get_option("--mesh")
      ->description(
          "device mesh shape over ranks 0..N-1: 4, 2x2, 2x2x2; with a parallel layout "
          "description as --plan, the world size (one number; default: mpiexec's)")
      ->required(false);
  cmd->get_option("--plan")->description(
      "fsdp ([S(0)] on every mesh dim), hsdp ([R, S(0)], 2-D mesh), tp (by tensor name), "
      "fsdp-tp (FSDP2 over TP, 2-D dp x tp mesh), a PLAN.json file, or a parallel layout "
      "description (megatron:tp=T,pp=P[,dp=D][,ep=E], vllm:tp=T[,pp=P][,dp=D][,ep=E]; "
      "--mesh is then the world size): each rank reads its own stage's and experts' pieces");
  AddWeightMapOptions(cmd, &args->engine);
  cmd->callback([args, exit_code] {
    *exit_code = RunOnRanks("load", args->shared, [&](Runner& run) { return Load(*args, run); });
  });
}

}  // namespace sdrt::cli
