#include "sdrt/tools/sdrt/internal/mapped_shard.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/fp8_scale.h"
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

// --cast fp8-tensor: one scale per FP8 weight, its whole tensor's amax, which ranks loaded
// one at a time cannot agree on. So the pieces are loaded in their source's dtype (`index`:
// the engine without the FP8 cast, `options`) and quantized here, each with the scale found
// while hashing its whole tensor (put together from every rank's pieces).
struct TensorScales {
  WeightMapOptions options;
  EngineIndex index;
  std::map<std::string, float> scale_of;  // an FP8 weight's one scale
};

// `x` (float32, bfloat16 or float16) quantized with `scale` into float8_e4m3fn.
absl::StatusOr<Tensor> Quantized(const Tensor& x, float scale) {
  SDRT_ASSIGN_OR_RETURN(const Tensor dense, x.Contiguous());
  SDRT_ASSIGN_OR_RETURN(Tensor codes, Tensor::Empty(dense.shape(), DType::kFloat8E4M3FN));
  if (!internal::QuantizeFloats(dense.data_ptr(), dense.dtype(), codes.data_ptr(),
                                DType::kFloat8E4M3FN, scale, dense.numel())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--cast fp8-tensor: no quantization of ", DTypeName(dense.dtype())));
  }
  return codes;
}

// A one-element float32 tensor holding `scale`.
absl::StatusOr<Tensor> ScaleTensor(float scale) {
  SDRT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(IntVector{1}, DType::kFloat32));
  *t.data<float>() = scale;
  return t;
}

// The full tensors of `group` (FP8 weights with their one scale each) made from the source
// dtype's, every FP8 weight's scale kept in `ts`. InvalidArgument for the FP8 parts of one
// split (their scales would be blocks of their source: --cast fp8-block).
absl::StatusOr<std::vector<Tensor>> FullPerTensor(const CheckpointSource& source,
                                                  const std::optional<WeightMap>& map,
                                                  const EngineIndex& e,
                                                  const EngineIndex::Group& group,
                                                  const MeshAndPlan& layout, TensorScales& ts) {
  std::vector<std::string> codes;
  for (size_t i : group.members) {
    if (internal::IsFp8Codes(e.index.tensors[i].dtype)) codes.push_back(e.index.tensors[i].name);
  }
  if (codes.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cast fp8-tensor: '", codes[0], "' and '", codes[1], "' are parts of one split, "
        "quantized by the blocks of their source: use --cast fp8-block"));
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<Tensor> wide,
                        AssembleFull(source, map, ts.index, ts.options, layout, codes));
  std::vector<Tensor> full;
  for (size_t i : group.members) {
    const std::string& name = e.index.tensors[i].name;
    if (name == codes[0]) {
      float amax = 0.0f;
      internal::AbsMax(wide[0].data_ptr(), wide[0].dtype(), wide[0].numel(), &amax);
      const float scale = internal::TileScale(amax, DType::kFloat8E4M3FN, false);
      ts.scale_of[name] = scale;
      SDRT_ASSIGN_OR_RETURN(full.emplace_back(), Quantized(wide[0], scale));
    } else {  // its scale (AddScaleLeaves: the weight's name and "_scale")
      SDRT_ASSIGN_OR_RETURN(full.emplace_back(), ScaleTensor(ts.scale_of.at(codes[0])));
    }
  }
  return full;
}

// Rank `rank`'s pieces of every tensor of `index`, FP8 weights quantized with their one scale.
absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> PerTensorPieces(
    const CheckpointSource& source, const std::optional<WeightMap>& map,
    const ShardedCheckpointIndex& index, const MeshAndPlan& layout, int64_t rank,
    const TensorScales& ts) {
  SDRT_ASSIGN_OR_RETURN(Map local, EngineLayout(ts.index, ts.options, layout, rank));
  SDRT_RETURN_IF_ERROR(LoadAsRank(source, map, rank, local));
  std::vector<std::pair<std::string, Tensor>> pieces;
  for (const ShardedCheckpointTensor& t : index.tensors) {
    const auto scale = ts.scale_of.find(t.name);
    if (scale != ts.scale_of.end()) {
      SDRT_ASSIGN_OR_RETURN(Tensor codes, Quantized(local.Find(t.name)->as_dtensor().local(),
                                                    scale->second));
      pieces.emplace_back(t.name, std::move(codes));
      continue;
    }
    const Value* v = local.Find(t.name);
    if (v == nullptr && absl::EndsWith(t.name, "_scale")) {
      const std::string weight = t.name.substr(0, t.name.size() - 6);
      SDRT_ASSIGN_OR_RETURN(Tensor one, ScaleTensor(ts.scale_of.at(weight)));
      pieces.emplace_back(t.name, std::move(one));
      continue;
    }
    if (v == nullptr) return absl::InternalError(absl::StrCat("no piece of ", t.name));
    pieces.emplace_back(t.name, v->as_dtensor().local());
  }
  return pieces;
}

}  // namespace

absl::StatusOr<ShardedCheckpointIndex> WriteMappedShards(const CheckpointSource& source,
                                                         const std::string& source_name,
                                                         const std::optional<WeightMap>& map,
                                                         const WeightMapOptions& engine,
                                                         const MeshAndPlan& layout,
                                                         const std::string& out_dir,
                                                         bool overwrite) {
  SDRT_ASSIGN_OR_RETURN(EngineIndex e,
                        MakeEngineIndex(layout.mesh->ToString(), source.TensorSpecs(),
                                        source.metadata(), map, engine, layout));
  ShardedCheckpointIndex& index = e.index;
  std::optional<TensorScales> per_tensor;
  if (engine.cast == "fp8-tensor") {
    per_tensor.emplace();
    per_tensor->options = engine;
    per_tensor->options.cast.clear();
    SDRT_ASSIGN_OR_RETURN(per_tensor->index,
                          MakeEngineIndex(layout.mesh->ToString(), source.TensorSpecs(),
                                          source.metadata(), map, per_tensor->options, layout));
  }
  // Each tensor's full hash: SRC's tensor's, or that of the tensor made, put together from
  // every rank's pieces.
  for (const EngineIndex::Group& group : e.groups) {
    std::vector<std::string> names;
    for (size_t i : group.members) names.push_back(index.tensors[i].name);
    std::vector<Tensor> full;
    const bool fp8 = std::any_of(group.members.begin(), group.members.end(), [&](size_t i) {
      return internal::IsFp8Codes(index.tensors[i].dtype);
    });
    if (per_tensor.has_value() && fp8) {
      SDRT_ASSIGN_OR_RETURN(full, FullPerTensor(source, map, e, group, layout, *per_tensor));
    } else if (group.as_in_source) {
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
    std::vector<std::pair<std::string, Tensor>> locals;
    if (per_tensor.has_value()) {
      SDRT_ASSIGN_OR_RETURN(locals,
                            PerTensorPieces(source, map, index, layout, rank, *per_tensor));
    } else {
      SDRT_ASSIGN_OR_RETURN(Map local, EngineLayout(e, engine, layout, rank));
      SDRT_RETURN_IF_ERROR(LoadAsRank(source, map, rank, local));
      for (const ShardedCheckpointTensor& t : index.tensors) {
        locals.emplace_back(t.name, local.Find(t.name)->as_dtensor().local());
      }
    }
    SDRT_RETURN_IF_ERROR(WriteShardedRankFile(folder.path(), folder.index(), rank, locals));
  }
  ShardedCheckpointIndex written = folder.index();
  written.dir = out_dir;
  SDRT_RETURN_IF_ERROR(folder.Finish());
  return written;
}

}  // namespace sdrt::cli
