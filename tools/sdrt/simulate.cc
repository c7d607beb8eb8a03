// `sdrt simulate --model M --from LAYOUT --to LAYOUT --cluster nodes=N,gpus=G[,links]
// [--disjoint] [--dtype-to fp8] [--bucket-mib B] [--scale S] [--rank R] [--json]`: the whole
// world's reshard plan of a model between two parallel layouts, made in this one process
// from the tensors' names and shapes alone (internal/world_plan.h): how long planning takes
// and how much memory, the bytes on the wire against the optimum, inter-node bytes with
// fan-out by node, the busiest rank's and node's bytes against their lower bounds, and the
// sync time the cost model of internal/engine/sync_cost.h predicts for sdrt's executor and
// for the funnel and the bucketed broadcast (docs/LAYOUTS.md, "Predicting a sync").
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/tools/sdrt/internal/world_plan.h"

namespace sdrt::cli {
namespace {

struct SimulateArgs {
  std::string model;
  double scale = 1.0;
  bool scale_given = false;  // --scale on the command line, whatever its value
  std::string from;
  std::string to;
  std::string cluster;
  bool disjoint = false;
  std::string dtype_to;
  bool dtype_to_given = false;
  int64_t rank = 0;
  SharedOptions shared;  // --json, --bucket-mib
};

// A description that gives every size spans what it says; one that leaves dp out spans
// `room` ranks (the cluster, or what the source leaves of it beside it).
absl::StatusOr<ParallelLayout> ParseLayout(const std::string& description, int64_t room) {
  absl::StatusOr<ParallelLayout> sized = ParallelLayout::Parse(description);
  return sized.ok() ? sized : ParallelLayout::Parse(description, room);
}

double Ratio(int64_t a, int64_t b) { return b > 0 ? static_cast<double>(a) / b : 1.0; }

// --dtype-to: a dtype name or the short names of `sdrt make --dtype` and `--cast` (bf16,
// f16, f32) and fp8 (any case), of a dtype a transfer casts weights to (CastKind kFloat;
// not the scale-only float8_e8m0fnu).
absl::StatusOr<DType> EngineDtype(const std::string& name) {
  const std::string lower = absl::AsciiStrToLower(name);
  static const std::pair<absl::string_view, absl::string_view> kShort[] = {
      {"fp8", "float8_e4m3fn"}, {"bf16", "bfloat16"}, {"f16", "float16"}, {"f32", "float32"}};
  absl::string_view full = lower;
  for (const auto& [alias, dtype] : kShort) {
    if (lower == alias) full = dtype;
  }
  absl::StatusOr<DType> dtype = DTypeFromName(full);
  if (!dtype.ok() || CastKindOf(*dtype) != CastKind::kFloat || *dtype == DType::kFloat8E8M0FNU) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dtype-to \"", name.substr(0, 64),
        "\": not a dtype an engine keeps weights in (fp8, bf16, f16, f32, or a dtype name: "
        "float8_e4m3fn, float8_e5m2, bfloat16, float16, float32, float64; any case)"));
  }
  return *dtype;
}

// Seconds as the unit that keeps them readable: "10 us", "1 ms", "2.5 s".
std::string Duration(double seconds) {
  if (seconds == 0) return "0 s";
  if (seconds < 1e-6) return absl::StrFormat("%.4g ns", seconds * 1e9);
  if (seconds < 1e-3) return absl::StrFormat("%.4g us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.4g ms", seconds * 1e3);
  return absl::StrFormat("%.4g s", seconds);
}

absl::Status RunSimulate(const SimulateArgs& args) {
  SDRT_ASSIGN_OR_RETURN(const internal::ClusterLinks cluster, ParseCluster(args.cluster));
  WorldPlanOptions options;
  options.disjoint = args.disjoint;
  options.rank = args.rank;
  options.bucket_bytes = args.shared.bucket_bytes();
  if (args.dtype_to_given) {
    SDRT_ASSIGN_OR_RETURN(options.dtype_to, EngineDtype(args.dtype_to));
  }
  absl::StatusOr<std::vector<SafetensorsTensorSpec>> tensors = ModelTensors(
      args.model, args.scale_given ? std::optional<double>(args.scale) : std::nullopt);
  if (!tensors.ok()) return InputError(tensors.status());
  const int64_t cluster_ranks = cluster.nodes * cluster.gpus_per_node;
  SDRT_ASSIGN_OR_RETURN(const ParallelLayout from, ParseLayout(args.from, cluster_ranks));
  const int64_t to_world = args.disjoint ? cluster_ranks - from.world_size() : cluster_ranks;
  if (to_world <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(from.ToString(), " takes all ", cluster_ranks,
                                                   " ranks of the cluster: none are left for "
                                                   "--disjoint's destination"));
  }
  absl::StatusOr<ParallelLayout> to = ParseLayout(args.to, to_world);
  if (!to.ok()) return to.status();
  SDRT_ASSIGN_OR_RETURN(const WorldPlanFigures f, PlanWorld(*tensors, from, *to, cluster, options));
  const auto& s = f.stats;
  const int64_t busiest = std::max(s.max_sent_bytes, s.max_received_bytes);
  const int64_t busiest_node = std::max(s.max_node_sent_bytes, s.max_node_received_bytes);
  if (args.shared.json) {
    const nlohmann::ordered_json out = {
        {"model", args.model},
        {"tensors", f.tensors},
        {"tensor_bytes", f.tensor_bytes},
        {"from", from.ToString()},
        {"to", to->ToString()},
        {"disjoint", args.disjoint},
        {"ranks", f.ranks},
        {"nodes", cluster.nodes},
        {"gpus_per_node", cluster.gpus_per_node},
        {"nvlink_bytes_per_second", cluster.nvlink},
        {"nic_bytes_per_second", cluster.nic},
        {"latency_seconds", cluster.latency},
        {"copy_bytes_per_second", cluster.copy},
        {"device", cluster.host ? "cpu" : "gpu"},
        {"bucket_bytes", options.bucket_bytes},
        {"dtype_to", options.dtype_to ? nlohmann::ordered_json(DTypeName(*options.dtype_to))
                                      : nlohmann::ordered_json()},
        {"rank", args.rank},
        {"place_seconds", f.place_seconds},
        {"plan_seconds", f.plan_seconds},
        {"peak_rss_bytes", f.peak_rss_bytes},
        {"world_plan_seconds", f.world_plan_seconds},
        {"world_peak_rss_bytes", f.world_peak_rss_bytes},
        {"distinct_layouts", f.distinct_layouts},
        {"kept_messages", f.kept_messages},
        {"rank_messages", f.rank_messages},
        {"messages", s.messages},
        {"wire_bytes", s.wire_bytes},
        {"optimum_bytes", s.optimum_bytes},
        {"internode_bytes", s.internode_bytes},
        {"max_sent_bytes", s.max_sent_bytes},
        {"max_received_bytes", s.max_received_bytes},
        {"lower_bound_bytes", f.lower_bound_bytes},
        {"max_node_sent_bytes", s.max_node_sent_bytes},
        {"max_node_received_bytes", s.max_node_received_bytes},
        {"node_lower_bound_bytes", f.node_lower_bound_bytes},
        {"predicted_seconds", f.sync.seconds},
        {"bound_seconds", f.bound_seconds},
        {"busiest_link_seconds", f.sync.busiest_link_seconds},
        {"max_nic_bytes", f.sync.max_nic_bytes},
        {"max_nvlink_bytes", f.sync.max_nvlink_bytes},
        {"max_exchanges", f.sync.max_exchanges},
        {"wire_messages", f.sync.messages},
        {"funnel_seconds", f.baselines.funnel_seconds},
        {"bucketed_broadcast_seconds", f.baselines.bucketed_broadcast_seconds},
        {"predict_seconds", f.predict_seconds},
        {"predict_peak_rss_bytes", f.predict_peak_rss_bytes}};
    std::cout << JsonText(out, 1) << "\n";
    return absl::OkStatus();
  }
  std::cout
      << Printable(args.model) << ": " << Counted(f.tensors, "tensor") << ", "
      << HumanBytes(f.tensor_bytes) << "\n"
      << from.ToString() << (args.disjoint ? " beside " : " -> ") << to->ToString() << " on "
      << cluster.nodes << " x " << cluster.gpus_per_node << " (" << Counted(f.ranks, "rank")
      << ")\n"
      << absl::StrFormat(
             "rank %d's plan in %.3f s (after placing, %.3f s), peak memory %s; every rank's "
             "messages (for the model) in %.3f s, peak %s\n",
             args.rank, f.plan_seconds, f.place_seconds,
             HumanBytes(f.peak_rss_bytes), f.world_plan_seconds, HumanBytes(f.world_peak_rss_bytes))
      << WithThousands(f.distinct_layouts) << " distinct layouts; rank " << args.rank
      << " sends or receives " << WithThousands(f.rank_messages) << " messages (its plan "
      << "keeps " << WithThousands(f.kept_messages)
      << ", once per layout; all ranks: " << WithThousands(s.messages) << ")\n"
      << absl::StrFormat("wire %s = %.3fx the optimum %s; inter-node %s\n",
                         HumanBytes(s.wire_bytes), Ratio(s.wire_bytes, s.optimum_bytes),
                         HumanBytes(s.optimum_bytes), HumanBytes(s.internode_bytes))
      << absl::StrFormat("busiest rank: sends %s, receives %s; lower bound %s (%.3fx)\n",
                         HumanBytes(s.max_sent_bytes), HumanBytes(s.max_received_bytes),
                         HumanBytes(f.lower_bound_bytes), Ratio(busiest, f.lower_bound_bytes))
      << absl::StrFormat(
             "busiest node, between nodes: sends %s, receives %s; lower bound %s (%.3fx)\n",
             HumanBytes(s.max_node_sent_bytes), HumanBytes(s.max_node_received_bytes),
             HumanBytes(f.node_lower_bound_bytes), Ratio(busiest_node, f.node_lower_bound_bytes))
      << absl::StrFormat(
             "links: %s %s/s, %s %s/s per %s, latency %s, copies %s/s; "
             "bucket %s\n",
             cluster.host ? "within a node" : "NVLink",
             HumanBytes(static_cast<int64_t>(cluster.nvlink)),
             cluster.host ? "between nodes" : "NIC", HumanBytes(static_cast<int64_t>(cluster.nic)),
             cluster.host ? "CPU rank" : "GPU", Duration(cluster.latency),
             HumanBytes(static_cast<int64_t>(cluster.copy)), HumanBytes(options.bucket_bytes))
      << absl::StrFormat(
             "busiest %s %s, busiest %s %s: %.3f s on the wire; bound %.3f s\n",
             cluster.host ? "link between nodes" : "NIC", HumanBytes(f.sync.max_nic_bytes),
             cluster.host ? "link within a node" : "NVLink", HumanBytes(f.sync.max_nvlink_bytes),
             f.sync.busiest_link_seconds, f.bound_seconds)
      << absl::StrFormat(
             "predicted sync: %.3f s (%s on the busiest rank, %s messages); "
             "funnel %.3f s, bucketed broadcast %.3f s (predicted in %.3f s, peak memory %s)\n",
             f.sync.seconds,
             f.sync.max_exchanges == 1 ? "1 exchange"
                                       : absl::StrCat(WithThousands(f.sync.max_exchanges),
                                                      " exchanges"),
             WithThousands(f.sync.messages),
             f.baselines.funnel_seconds, f.baselines.bucketed_broadcast_seconds, f.predict_seconds,
             HumanBytes(f.predict_peak_rss_bytes));
  return absl::OkStatus();
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Plan a model's weight sync between two parallel layouts for a whole cluster in this one "
      "process, from tensor names and shapes alone: planning time and memory, wire bytes "
      "against the optimum, inter-node bytes, the busiest rank against its lower bound, and "
      "the predicted sync time beside a rank-0 funnel's and a bucketed broadcast's.");
  cmd->add_option("--model", args->model,
                  "a safetensors file or folder (header-only descriptions too) or an "
                  "architecture of `sdrt make --arch`")
      ->required();
  cmd->add_option("--scale", args->scale, "with an architecture: its --scale ((0, 16])")
      ->check(DecimalNumber())  // not CLI11's reading of '' as 0, nor hexadecimal
      ->capture_default_str();
  cmd->add_option("--from", args->from, "the source's layout, e.g. megatron:tp=4,pp=8,ep=16")
      ->required();
  cmd->add_option("--to", args->to, "the destination's layout, e.g. vllm:tp=8,dp=16")->required();
  cmd->add_option("--cluster", args->cluster,
                  "nodes=N,gpus=G[,nvlink=450GB/s][,nic=50GB/s][,latency=10us][,copy=1000GB/s]"
                  "[,device=gpu|cpu]: rank r is on node r / G; bandwidths per GPU and direction; "
                  "device=cpu: the executor on the CPU, as sdrt bench's links row measures")
      ->required();
  cmd->add_option("--dtype-to", args->dtype_to,
                  "the engine's dtype of its linear layers' weights (fp8 = float8_e4m3fn): the "
                  "wire carries the narrower");
  cmd->add_flag("--disjoint", args->disjoint,
                "the destination's ranks follow the source's (an engine beside its trainer) "
                "instead of being the same ranks");
  cmd->add_option("--rank", args->rank, "whose plan is kept, as its PlanReshard keeps it")
      ->check(WholeNumber(0, kMaxMeshRanks - 1))
      ->capture_default_str();
  AddSharedOptions(cmd, kJsonOption | kBucketMibOption, &args->shared);
  cmd->callback([cmd, args, exit_code] {
    args->dtype_to_given = cmd->count("--dtype-to") > 0;
    args->scale_given = cmd->count("--scale") > 0;
    const absl::Status status = RunSimulate(*args);
    *exit_code = status.ok() ? kExitOk : ReportError("simulate", status, /*rank=*/0);
  });
}

}  // namespace sdrt::cli
