#include "sdrt/tools/sdrt/internal/engine_index.h"

#include <filesystem>
#include <optional>
#include <system_error>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {

absl::StatusOr<Map> EngineLayout(const EngineIndex& e, const WeightMapOptions& engine,
                                 const MeshAndPlan& layout, int64_t rank,
                                 const std::vector<std::string>* only) {
  if (only == nullptr) {
    SDRT_ASSIGN_OR_RETURN(Map local, layout.plan.MetaStateDict(e.tensors, layout.mesh, rank));
    SDRT_RETURN_IF_ERROR(AddScaleLeaves(engine, rank, local));
    return local;
  }
  // The tensors named, and the weights of scales named (AddScaleLeaves makes those).
  std::set<size_t> wanted;
  for (const std::string& name : *only) {
    std::vector<std::string> candidates = {name};
    for (const absl::string_view suffix : {"_scale_inv", "_scale"}) {
      if (absl::EndsWith(name, suffix)) {
        candidates.push_back(name.substr(0, name.size() - suffix.size()));
      }
    }
    for (const std::string& c : candidates) {
      const auto it = e.by_name.find(c);
      if (it != e.by_name.end()) wanted.insert(it->second);
    }
  }
  std::vector<SafetensorsTensorSpec> specs;
  for (size_t i : wanted) specs.push_back(e.tensors[i]);  // in the list's order
  SDRT_ASSIGN_OR_RETURN(Map local, layout.plan.MetaStateDict(specs, layout.mesh, rank));
  SDRT_RETURN_IF_ERROR(AddScaleLeaves(engine, rank, local));
  return local;
}

namespace {

// Between a PLAN.json's path and its rules' hash in EngineLayoutText.
constexpr absl::string_view kRulesHash = " (rules xxh64 ";

// A record's text without its rules' hash: "--mesh 2 --plan /d/p.json" (what to type).
absl::string_view WithoutHash(absl::string_view text) {
  const size_t hash = text.rfind(kRulesHash);
  return hash == absl::string_view::npos ? text : text.substr(0, hash);
}

// What CheckEngineLayout compares of a record: the text without a PLAN.json's path when it
// names the rules' hash (the content counts, not where the file is).
std::string ComparedPart(absl::string_view text) {
  const size_t hash = text.rfind(kRulesHash);
  const size_t plan = text.find(" --plan ");
  if (hash == absl::string_view::npos || plan == absl::string_view::npos || plan > hash) {
    return std::string(text);
  }
  return absl::StrCat(text.substr(0, plan + 8), text.substr(hash + 1));
}

// Whether `recorded` is the layout `wanted` (EngineLayoutText's): by the rules' hash, or by
// path when the record has none (an older sdrt's).
bool SameLayout(absl::string_view recorded, absl::string_view wanted) {
  if (recorded.rfind(kRulesHash) == absl::string_view::npos) {
    return recorded == WithoutHash(wanted);
  }
  return ComparedPart(recorded) == ComparedPart(wanted);
}

}  // namespace

std::string EngineLayoutText(const MeshAndPlan& layout) {
  const std::string mesh = absl::StrCat("--mesh ", absl::StrJoin(layout.mesh->shape(), "x"));
  if (layout.plan.kind() != ShardingPlan::Kind::kCustom) {
    return absl::StrCat(mesh, " --plan ", layout.plan.name());
  }
  // A PLAN.json by its absolute path, however it was spelled (./p.json, p.json, /d/p.json),
  // and its rules' hash.
  std::string plan = layout.plan.name();
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::weakly_canonical(plan, error);
  if (!error) plan = absolute.string();
  return absl::StrCat(mesh, " --plan ", plan, kRulesHash,
                      absl::Hex(layout.plan.rules_xxh64(), absl::kZeroPad16), ")");
}

std::string RecordedEngineLayout(const std::map<std::string, std::string>& metadata) {
  const auto it = metadata.find(kEngineLayoutMetadataKey);
  return it == metadata.end() ? std::string() : it->second;
}

absl::Status CheckEngineLayout(const std::string& source_name, const std::string& recorded,
                               const std::string& wanted) {
  if (recorded.empty() || SameLayout(recorded, wanted)) return absl::OkStatus();
  const bool hashed = absl::StrContains(recorded, kRulesHash);
  return absl::InvalidArgumentError(absl::StrCat(
      source_name, " holds an engine's layout for ", recorded, " (__metadata__ \"",
      kEngineLayoutMetadataKey, "\": its fused and regrouped tensors hold each rank's parts), not ",
      wanted, ": read it with ", WithoutHash(recorded), hashed ? " (the rules recorded)" : "",
      ", or map the full checkpoint again"));
}

absl::StatusOr<EngineIndex> MakeEngineIndex(const std::string& mesh_spec,
                                            const std::vector<SafetensorsTensorSpec>& sources,
                                            const std::map<std::string, std::string>& metadata,
                                            const std::optional<WeightMap>& map,
                                            const WeightMapOptions& engine,
                                            const MeshAndPlan& layout) {
  const DeviceMesh& mesh = *layout.mesh;
  if (mesh.num_ranks() > kMaxShardedCheckpointRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--mesh ", mesh_spec, ": more than ", kMaxShardedCheckpointRanks, " ranks"));
  }
  EngineIndex out;
  SDRT_ASSIGN_OR_RETURN(out.tensors, EngineTensors(map, engine, sources, layout.plan, mesh));
  for (size_t i = 0; i < out.tensors.size(); ++i) out.by_name.emplace(out.tensors[i].name, i);
  ShardedCheckpointIndex& index = out.index;
  index.world_size = mesh.num_ranks();
  index.mesh = layout.mesh;
  index.plan = layout.plan.name();
  index.metadata = metadata;
  for (int64_t r = 0; r < index.world_size; ++r) {
    index.files.push_back(RankFileName(r, index.world_size));
  }
  // Rank 0's layout names every tensor (scales included) in the rank files' order.
  SDRT_ASSIGN_OR_RETURN(const Map first, EngineLayout(out, engine, layout, 0));
  for (size_t i = 0; i < first.size(); ++i) {
    const DTensor& d = first.value(i).as_dtensor();
    ShardedCheckpointTensor& t = index.tensors.emplace_back();
    t.name = first.key(i);
    t.dtype = d.dtype();
    t.shape = d.global_shape();
    t.placements = d.placements();
    SDRT_RETURN_IF_ERROR(
        internal::CheckShardingCutsWholeBytes(t.name, t.dtype, t.shape, mesh, t.placements));
  }
  // The groups: a split's destinations (its lowering makes them together) with their scales
  // when they are FP8, FP8 codes with their scales, every other tensor alone.
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < index.tensors.size(); ++i) position.emplace(index.tensors[i].name, i);
  std::set<size_t> grouped;
  // Tensor `i` into `members` once, with the scales beside it when it is FP8 codes.
  const auto add = [&](size_t i, std::vector<size_t>& members) {
    if (!grouped.insert(i).second) return;
    members.push_back(i);
    if (!internal::IsFp8Codes(index.tensors[i].dtype)) return;
    for (const char* suffix : {"_scale_inv", "_scale"}) {
      const auto it = position.find(index.tensors[i].name + suffix);
      if (it != position.end() && grouped.insert(it->second).second) members.push_back(it->second);
    }
  };
  const WeightMap::Compiled* compiled = map.has_value() ? &internal::CompiledOrEmpty(*map) : nullptr;
  for (const SafetensorsTensorSpec& s : sources) {
    if (compiled == nullptr) break;
    const std::optional<internal::SourceMatch> m = internal::MatchSource(*compiled, s.name);
    if (!m.has_value()) continue;
    const WeightMapRule& r = compiled->rule_list[m->rule];
    // A fuse or regroup into kShards holds each part's components together: its tensor is
    // this layout's alone (a cast, a rename, a pad or a kGroups fuse reads on any).
    if ((r.kind == WeightMapRule::Kind::kFuse || r.kind == WeightMapRule::Kind::kRegroup) &&
        r.interleave == WeightMapRule::Interleave::kShards) {
      index.metadata[kEngineLayoutMetadataKey] = EngineLayoutText(layout);
    }
    if (r.kind != WeightMapRule::Kind::kSplit) continue;
    std::vector<size_t> members;
    for (const std::string& d : m->destinations) {
      const auto it = position.find(d);
      if (it != position.end()) add(it->second, members);
    }
    if (!members.empty()) out.groups.emplace_back().members = std::move(members);
  }
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    if (grouped.count(i) || !internal::IsFp8Codes(index.tensors[i].dtype)) continue;
    add(i, out.groups.emplace_back().members);
  }
  for (size_t i = 0; i < index.tensors.size(); ++i) {
    if (!grouped.count(i)) out.groups.emplace_back().members.push_back(i);
  }
  // Which keep the source's bytes.
  std::map<std::string, const SafetensorsTensorSpec*> by_name;
  for (const SafetensorsTensorSpec& s : sources) by_name.emplace(s.name, &s);
  for (EngineIndex::Group& g : out.groups) {
    g.as_in_source = true;
    for (size_t i : g.members) {
      const ShardedCheckpointTensor& t = index.tensors[i];
      const auto it = by_name.find(t.name);
      const bool same = it != by_name.end() && it->second->dtype == t.dtype &&
                        it->second->shape == t.shape &&
                        (compiled == nullptr || !internal::MatchSource(*compiled, t.name));
      g.as_in_source = g.as_in_source && same;
    }
  }
  return out;
}

}  // namespace sdrt::cli
