#include "sdrt/tools/sdrt/internal/map_listing.h"

#include <iostream>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// One run of a destination local: its elements [start, start + length) along `dim` hold
// the source's [source_start, source_start + length).
struct Run {
  int64_t rank = 0;
  int local = 0;
  int64_t start = 0;
  int64_t length = 0;
  std::string source;
  int64_t source_start = 0;
};

}  // namespace

absl::Status InspectMap(const std::string& path, const WeightMapOptions& engine,
                        const std::string& mesh_spec, const std::string& plan_spec, bool json) {
  if (mesh_spec.empty() || plan_spec.empty()) {
    return absl::InvalidArgumentError("--map needs --mesh and --plan (the engine's layout)");
  }
  SDRT_ASSIGN_OR_RETURN(const CheckpointSource source, CheckpointSource::Open(path));
  SDRT_ASSIGN_OR_RETURN(DeviceMesh made, DeviceMesh::FromString(mesh_spec));
  const auto mesh = std::make_shared<const DeviceMesh>(std::move(made));
  SDRT_ASSIGN_OR_RETURN(const ShardingPlan plan, ShardingPlan::FromSpec(plan_spec));
  const std::vector<SafetensorsTensorSpec> sources = source.TensorSpecs();
  SDRT_ASSIGN_OR_RETURN(const std::optional<WeightMap> map,
                        ParseWeightMap(engine, path, sources));
  SDRT_ASSIGN_OR_RETURN(const std::vector<SafetensorsTensorSpec> tensors,
                        EngineTensors(map, engine, sources, plan, *mesh));
  // Rank 0's layout names every rank's pieces; the sources are described as its own.
  SDRT_ASSIGN_OR_RETURN(const Map meta, plan.MetaStateDict(tensors, mesh, mesh->ranks()[0]));
  std::vector<std::vector<internal::LeafLayout>> per_rank(1);
  for (const SafetensorsTensorSpec& s : sources) {
    internal::LeafLayout& l = per_rank[0].emplace_back();
    l.path = s.name;
    l.source = true;
    l.dtype = s.dtype;
    l.shape = s.shape;
  }
  SDRT_RETURN_IF_ERROR(internal::DescribeStateDict(meta, /*source=*/false, per_rank[0]));
  SDRT_ASSIGN_OR_RETURN(const internal::MapLowering lowering,
                        internal::LowerLeafLayouts(*map->compiled(), per_rank,
                                                   /*quantize_on_senders=*/false));
  // Per destination leaf, its runs in rank, local and start order; its dim.
  std::map<std::string, std::vector<Run>> runs;
  std::map<std::string, int> dim_of;
  for (const internal::LoweredDestination& d : lowering.destinations) {
    for (size_t i = 0; i < d.views.size(); ++i) {
      const internal::LoweredView& v = d.views[i];
      const std::string& leaf = d.leaves[static_cast<size_t>(v.leaf)];
      runs[leaf].push_back({v.rank, v.local, v.start, v.length, d.name, d.boxes[i].offsets[d.dim]});
      dim_of[leaf] = d.dim;
    }
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::string text;
  for (const SafetensorsTensorSpec& t : tensors) {
    const auto it = runs.find(t.name);
    if (it == runs.end()) continue;
    std::vector<Run>& list = it->second;
    std::sort(list.begin(), list.end(), [](const Run& a, const Run& b) {
      return std::tie(a.rank, a.local, a.start) < std::tie(b.rank, b.local, b.start);
    });
    const DTensor& d = meta.Find(t.name)->as_dtensor();
    const int dim = dim_of[t.name];
    absl::StrAppend(&text, Printable(t.name), ": ", DTypeName(t.dtype), ShapeToString(t.shape),
                    ", ", PlacementsToString(d.placements()), " on mesh ", mesh_spec, ", along dim ",
                    dim, "\n");
    nlohmann::ordered_json pieces = nlohmann::ordered_json::array();
    int64_t last_rank = -1;
    for (const Run& r : list) {
      const std::string head = absl::StrCat("  rank ", r.rank, ": ");
      absl::StrAppend(&text, r.rank != last_rank ? head : std::string(head.size(), ' '),
                      "[", r.start, ", ", r.start + r.length, ") <- ", Printable(r.source), " [",
                      r.source_start, ", ", r.source_start + r.length, ")\n");
      last_rank = r.rank;
      pieces.push_back({{"rank", r.rank},
                        {"local", r.local},
                        {"start", r.start},
                        {"length", r.length},
                        {"source", r.source},
                        {"source_start", r.source_start}});
    }
    out.push_back({{"tensor", t.name},
                   {"dtype", DTypeName(t.dtype)},
                   {"shape", t.shape},
                   {"placements", PlacementsToString(d.placements())},
                   {"dim", dim},
                   {"pieces", std::move(pieces)}});
  }
  for (const internal::RenamedDestination& r : lowering.renamed) {
    absl::StrAppend(&text, Printable(r.path), " <- ", Printable(r.name), " (renamed)\n");
    out.push_back({{"tensor", r.path}, {"renamed_from", r.name}});
  }
  std::cout << (json ? JsonText(out, 1) + "\n" : text);
  return absl::OkStatus();
}

}  // namespace sdrt::cli
