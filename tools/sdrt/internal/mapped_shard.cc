#include "sdrt/tools/sdrt/internal/mapped_shard.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::cli {
namespace {

// Fills `local` (rank `rank`'s layout, or part of it) from `source` through `map`; every leaf
// must be found.
absl::Status LoadAsRank(const CheckpointSource& source, const std::optional<WeightMap>& map,
                        int64_t rank, Map& local) {
  LoadOptions options;
  options.read = ReadMode::kAll;
  options.rank = static_cast<int>(rank);
  if (map.has_value()) options.weight_map = *map;
  SDRT_ASSIGN_OR_RETURN(const LoadResult result, LoadStateDict(source, local, options));
  if (!result.missing_keys.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nothing in the checkpoint makes '", result.missing_keys[0], "' (",
        result.missing_keys.size(), " tensors of the engine's layout are not made)"));
  }
  return absl::OkStatus();
}

// The full engine tensors `names` (FP8 codes with their scales, made together, or one
// tensor), assembled from every rank's pieces, each piece loaded once.
absl::StatusOr<std::vector<Tensor>> AssembleFull(const CheckpointSource& source,
                                                 const std::optional<WeightMap>& map,
                                                 const EngineIndex& e,
                                                 const WeightMapOptions& engine,
                                                 const MeshAndPlan& layout,
                                                 const std::vector<std::string>& names) {
  std::vector<Tensor> full(names.size());
  std::vector<std::set<std::pair<IntVector, IntVector>>> placed(names.size());
  for (int64_t rank = 0; rank < layout.mesh->num_ranks(); ++rank) {
    SDRT_ASSIGN_OR_RETURN(Map all, EngineLayout(e, engine, layout, rank, &names));
    Map wanted;
    std::vector<LocalShardInfo> infos;
    bool fresh = false;
    for (size_t i = 0; i < names.size(); ++i) {
      const Value* v = all.Find(names[i]);
      if (v == nullptr) return absl::InternalError(absl::StrCat("no layout of ", names[i]));
      const DTensor& d = v->as_dtensor();
      SDRT_ASSIGN_OR_RETURN(LocalShardInfo info, ComputeLocalShapeAndGlobalOffset(
                                                     d.global_shape(), *d.mesh(), d.placements(),
                                                     rank));
      if (!info.is_slice) {
        return absl::UnimplementedError(absl::StrCat(
            "'", names[i], "' is laid out in pieces that are not one box each (",
            PlacementsToString(d.placements()), "); a mapped sharded folder takes boxes only"));
      }
      fresh = fresh || placed[i].emplace(info.global_offset, info.local_shape).second;
      infos.push_back(std::move(info));
      wanted.Set(names[i], *v);
      if (!full[i].defined()) {
        SDRT_ASSIGN_OR_RETURN(full[i], Tensor::Empty(d.global_shape(), d.dtype()));
      }
    }
    if (!fresh) continue;  // every piece of this rank is one another rank had
    SDRT_RETURN_IF_ERROR(LoadAsRank(source, map, rank, wanted));
    for (size_t i = 0; i < names.size(); ++i) {
      Tensor into = full[i];
      for (size_t dim = 0; dim < infos[i].local_shape.size(); ++dim) {
        SDRT_ASSIGN_OR_RETURN(into, into.Narrow(static_cast<int>(dim),
                                                infos[i].global_offset[dim],
                                                infos[i].local_shape[dim]));
      }
      SDRT_RETURN_IF_ERROR(into.CopyFrom(wanted.Find(names[i])->as_dtensor().local()));
    }
  }
  return full;
}

}  // namespace

absl::StatusOr<ShardedCheckpointIndex> WriteMappedShards(const CheckpointSource& source,
                                                         const std::string& source_name,
                                                         const std::optional<WeightMap>& map,
                                                         const WeightMapOptions& engine,
                                                         const MeshAndPlan& layout,
                                                         const std::string& out_dir,
                                                         bool overwrite) {
  if (engine.cast == "fp8-tensor") {
    return absl::InvalidArgumentError(
        "--cast fp8-tensor: one scale per tensor needs every rank's pieces at once, and sdrt "
        "shard makes one rank at a time (use --cast fp8-block, or sdrt load)");
  }
  SDRT_ASSIGN_OR_RETURN(EngineIndex e,
                        MakeEngineIndex(layout.mesh->ToString(), source.TensorSpecs(),
                                        source.metadata(), map, engine, layout));
  ShardedCheckpointIndex& index = e.index;
  // Each tensor's full hash: SRC's tensor's, or that of the tensor made, put together from
  // every rank's pieces.
  for (const EngineIndex::Group& group : e.groups) {
    std::vector<std::string> names;
    for (size_t i : group.members) names.push_back(index.tensors[i].name);
    std::vector<Tensor> full;
    if (group.as_in_source) {
      for (const std::string& name : names) {
        SDRT_ASSIGN_OR_RETURN(full.emplace_back(), source.Get(name));
      }
    } else {
      SDRT_ASSIGN_OR_RETURN(full, AssembleFull(source, map, e, engine, layout, names));
    }
    for (size_t k = 0; k < group.members.size(); ++k) {
      SDRT_ASSIGN_OR_RETURN(index.tensors[group.members[k]].xxh64, TensorXxh64(full[k]));
    }
  }
  // The rank files, one rank at a time.
  SDRT_ASSIGN_OR_RETURN(ShardedCheckpointFolder folder,
                        ShardedCheckpointFolder::Begin(index, out_dir, source_name, overwrite));
  for (int64_t rank = 0; rank < index.world_size; ++rank) {
    SDRT_ASSIGN_OR_RETURN(Map local, EngineLayout(e, engine, layout, rank));
    SDRT_RETURN_IF_ERROR(LoadAsRank(source, map, rank, local));
    std::vector<std::pair<std::string, Tensor>> locals;
    for (const ShardedCheckpointTensor& t : index.tensors) {
      locals.emplace_back(t.name, local.Find(t.name)->as_dtensor().local());
    }
    SDRT_RETURN_IF_ERROR(WriteShardedRankFile(folder.path(), folder.index(), rank, locals));
  }
  ShardedCheckpointIndex written = folder.index();
  written.dir = out_dir;
  SDRT_RETURN_IF_ERROR(folder.Finish());
  return written;
}

}  // namespace sdrt::cli
