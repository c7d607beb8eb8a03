#include "sdrt/tools/sdrt/internal/world_plan.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/options.h"
#include "sdrt/tools/sdrt/internal/synthetic.h"

namespace sdrt::cli {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<internal::ClusterLinks> ParseCluster(const std::string& text) {
  const auto bad = [&text](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cluster \"", text.substr(0, 128), "\": ", why,
                     " (expected nodes=N,gpus=G[,nvlink=450GB/s][,nic=50GB/s][,latency=10us]"
                     "[,copy=1000GB/s][,device=gpu|cpu])"));
  };
  internal::ClusterLinks links;
  absl::flat_hash_set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (!seen.insert(std::string(kv.first)).second) {
      return bad(absl::StrCat(kv.first.substr(0, 16), " given twice"));
    }
    if (kv.first == "nodes" || kv.first == "gpus") {
      int64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value) || value < 1 || value > kMaxMeshRanks ||
          kv.second.find_first_not_of("0123456789") != absl::string_view::npos) {
        return bad(absl::StrCat("\"", item, "\" is not key=N with N in [1, ", kMaxMeshRanks, "]"));
      }
      (kv.first == "nodes" ? links.nodes : links.gpus_per_node) = value;
      continue;
    }
    if (kv.first == "device") {
      if (kv.second != "gpu" && kv.second != "cpu") {
        return bad(absl::StrCat("\"", item, "\" is not device=gpu or device=cpu"));
      }
      links.host = kv.second == "cpu";
      continue;
    }
    const bool time = kv.first == "latency";
    if (!time && kv.first != "nvlink" && kv.first != "nic" && kv.first != "copy") {
      return bad(absl::StrCat("unknown \"", item, "\""));
    }
    // A decimal number (ParseDecimal's: exponents too), then its unit; longer units first.
    static const std::pair<absl::string_view, double> kRates[] = {
        {"TB/s", 1e12}, {"GB/s", 1e9}, {"MB/s", 1e6}, {"Gb/s", 1e9 / 8}};
    static const std::pair<absl::string_view, double> kTimes[] = {
        {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}, {"s", 1}};
    double scale = 0;
    absl::string_view digits = kv.second;
    for (const auto& [name, factor] : time ? absl::MakeSpan(kTimes) : absl::MakeSpan(kRates)) {
      if (scale == 0 && absl::ConsumeSuffix(&digits, name)) scale = factor;
    }
    if (scale == 0) {
      return bad(absl::StrCat("\"", item, "\" needs a unit: ",
                              time ? "s, ms, us or ns"
                                   : "TB/s, GB/s, MB/s or Gb/s (1 PB/s is 1000TB/s)"));
    }
    double number = 0;
    // Spaces around the number ("nic= 50 GB/s" quoted) are allowed, as they always were.
    if (!ParseDecimal(absl::StripAsciiWhitespace(digits), &number)) {
      return bad(absl::StrCat("\"", item, "\" has no number"));
    }
    if (!std::isfinite(number)) {  // 1e309 reads as inf
      return bad(absl::StrCat("\"", item, "\" is not a finite number"));
    }
    // Rates from 1 MB/s (a slower link makes every figure meaningless) to 1 PB/s.
    const double value = number * scale;
    if (time ? (value < 0 || value > 1) : (value < 1e6 || value > 1e15)) {
      return bad(
          absl::StrCat("\"", item, "\" is out of range: ", time ? "0 to 1 s" : "1 MB/s to 1 PB/s"));
    }
    (time                   ? links.latency
     : kv.first == "nvlink" ? links.nvlink
     : kv.first == "nic"    ? links.nic
                            : links.copy) = value;
  }
  if (!seen.contains("nodes") || !seen.contains("gpus"))
    return bad("nodes and gpus are both needed");
  if (links.nodes * links.gpus_per_node > kMaxSimulatedRanks) {
    return bad(absl::StrCat("more than ", kMaxSimulatedRanks,
                            " ranks, the most simulate plans (its time grows with the square of "
                            "the replicas)"));
  }
  return links;
}

bool CastsToEngineDtype(const std::string& name, const IntVector& shape) {
  const absl::string_view n = name;
  return shape.size() >= 2 && absl::EndsWith(n, ".weight") && !absl::EndsWith(n, ".gate.weight") &&
         !absl::StrContains(n, "embed") && !absl::StrContains(n, "lm_head") &&
         !absl::StrContains(n, "norm");
}

absl::StatusOr<std::vector<SafetensorsTensorSpec>> ModelTensors(const std::string& model,
                                                                std::optional<double> scale) {
  struct stat st;
  if (lstat(model.c_str(), &st) == 0) {
    if (scale.has_value()) {
      return absl::InvalidArgumentError("--scale goes with an architecture's name, not a file");
    }
    CheckpointSource::Options options;
    options.file_options.accept_header_only = true;
    SDRT_ASSIGN_OR_RETURN(CheckpointSource source, CheckpointSource::Open(model, options));
    return source.TensorSpecs();
  }
  absl::StatusOr<ArchConfig> config = ScaledArch(model, scale.value_or(1.0));
  if (!config.ok()) {
    const std::vector<std::string> names = ArchNames();
    const bool known = std::find(names.begin(), names.end(), model) != names.end();
    return absl::InvalidArgumentError(absl::StrCat("--model ", model, ": ",
                                                   known ? "" : "no such file or folder, and ",
                                                   config.status().message()));
  }
  SDRT_ASSIGN_OR_RETURN(SyntheticStateDict synthetic,
                        SyntheticStateDict::Create(*config, DType::kBFloat16, 0));
  return synthetic.specs();
}

absl::StatusOr<WorldPlanFigures> PlanWorld(const std::vector<SafetensorsTensorSpec>& tensors,
                                           const ParallelLayout& from, const ParallelLayout& to,
                                           const internal::ClusterLinks& cluster,
                                           const WorldPlanOptions& world) {
  const bool disjoint = world.disjoint;
  const int64_t rank = world.rank;
  WorldPlanFigures figures;
  const int64_t to_first = disjoint ? from.world_size() : 0;
  figures.ranks = std::max(from.world_size(), to_first + to.world_size());
  if (figures.ranks > cluster.nodes * cluster.gpus_per_node) {
    return absl::InvalidArgumentError(
        absl::StrCat(from.ToString(), disjoint ? " beside " : " and ", to.ToString(), " need ",
                     figures.ranks, " ranks; the cluster has ", cluster.nodes, " x ",
                     cluster.gpus_per_node, " = ", cluster.nodes * cluster.gpus_per_node));
  }
  if (rank < 0 || rank >= figures.ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", rank, " is outside the world of ", figures.ranks, " ranks"));
  }
  auto start = std::chrono::steady_clock::now();
  SDRT_ASSIGN_OR_RETURN(std::vector<LaidOutTensor> sources, from.Place(tensors, 0));
  SDRT_ASSIGN_OR_RETURN(std::vector<LaidOutTensor> destinations, to.Place(tensors, to_first));
  figures.place_seconds = SecondsSince(start);

  std::vector<internal::TransferTensor> descriptors(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    internal::TransferTensor& t = descriptors[i];
    t.name = tensors[i].name;
    t.dtype = tensors[i].dtype;
    t.shape = tensors[i].shape;
    t.source.mesh = std::move(sources[i].mesh);
    t.source.placements = std::move(sources[i].placements);
    t.destination.mesh = std::move(destinations[i].mesh);
    t.destination.placements = std::move(destinations[i].placements);
    if (world.dtype_to && CastsToEngineDtype(t.name, t.shape)) t.destination_dtype = world.dtype_to;
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(t.shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(t.dtype, numel));
    figures.tensor_bytes += bytes;
  }
  figures.tensors = static_cast<int64_t>(tensors.size());
  internal::TransferPlanOptions options;
  options.world_size = figures.ranks;
  options.node_of_rank.resize(static_cast<size_t>(figures.ranks));
  for (int64_t r = 0; r < figures.ranks; ++r) {
    options.node_of_rank[static_cast<size_t>(r)] = r / cluster.gpus_per_node;
  }
  rusage usage{};
  // The rank's plan, as its PlanReshard makes it: every rank's moves counted, its own kept.
  {
    options.rank = rank;
    std::vector<internal::TransferTensor> copy = descriptors;
    start = std::chrono::steady_clock::now();
    SDRT_ASSIGN_OR_RETURN(const internal::TransferPlan plan,
                          internal::PlanTransfer(std::move(copy), options));
    figures.plan_seconds = SecondsSince(start);
    getrusage(RUSAGE_SELF, &usage);
    figures.peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
    // The rank's messages of each distinct layout, counted once per layout.
    absl::flat_hash_map<const internal::TransferLayoutPlan*, int64_t> layouts;
    for (const internal::TransferTensorPlan& t : plan.tensors) {
      const auto [it, fresh] = layouts.try_emplace(t.layout.get(), 0);
      if (fresh) {
        it->second = static_cast<int64_t>(
            std::count_if(t.messages().begin(), t.messages().end(),
                          [](const auto& m) { return m.source_rank != m.destination_rank; }));
        figures.kept_messages += it->second;
      }
      figures.rank_messages += it->second;
    }
    figures.distinct_layouts = static_cast<int64_t>(layouts.size());
  }
  // Every rank's messages: the model runs every rank's schedule.
  options.rank = -1;
  start = std::chrono::steady_clock::now();
  SDRT_ASSIGN_OR_RETURN(internal::TransferPlan plan,
                        internal::PlanTransfer(std::move(descriptors), options));
  figures.world_plan_seconds = SecondsSince(start);
  getrusage(RUSAGE_SELF, &usage);
  figures.world_peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  figures.stats = plan.stats;
  const int64_t gpus = cluster.gpus_per_node;
  const int64_t nodes_used = (figures.ranks + gpus - 1) / gpus;
  figures.lower_bound_bytes = plan.stats.max_received_bytes;
  figures.node_lower_bound_bytes =
      std::max(plan.stats.max_node_received_bytes, plan.stats.internode_bytes / nodes_used);
  figures.bound_seconds = std::max(
      static_cast<double>(figures.node_lower_bound_bytes) / static_cast<double>(gpus) / cluster.nic,
      static_cast<double>(figures.lower_bound_bytes) /
          (cluster.nvlink + (nodes_used > 1 ? cluster.nic : 0.0)));
  start = std::chrono::steady_clock::now();
  SDRT_ASSIGN_OR_RETURN(figures.sync, internal::PredictSync(plan, cluster, world.bucket_bytes));
  SDRT_ASSIGN_OR_RETURN(figures.baselines,
                        internal::PredictBaselines(plan, cluster, world.bucket_bytes));
  figures.predict_seconds = SecondsSince(start);
  getrusage(RUSAGE_SELF, &usage);
  figures.predict_peak_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;
  return figures;
}

}  // namespace sdrt::cli
