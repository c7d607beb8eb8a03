// LoadShardedFolder (load_paths.h): an sdrt sharded folder into any layout, as a reshard
// from the folder's own layout. Each rank maps only the rank files it is given (f mod N);
// the folder's pieces are the reshard's sources, `local`'s matched leaves its destinations.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/load/load_paths.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";

// DataLoss when `now` (index.json as a rank file was read with it) is not `opened`, the
// index the source read: another checkpoint moved into the folder since, whose tensors the
// old index's positions would take for others.
absl::Status SameIndex(const std::string& dir, const ShardedCheckpointIndex& opened,
                       const ShardedCheckpointIndex& now) {
  bool same = now.world_size == opened.world_size && now.tensors.size() == opened.tensors.size();
  for (size_t t = 0; same && t < opened.tensors.size(); ++t) {
    const ShardedCheckpointTensor& a = opened.tensors[t];
    const ShardedCheckpointTensor& b = now.tensors[t];
    same = a.name == b.name && a.xxh64 == b.xxh64 && a.dtype == b.dtype && a.shape == b.shape &&
           a.placements == b.placements;
  }
  if (same) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      dir, ": ", kShardedCheckpointIndexName,
      " changed since the checkpoint was opened (another checkpoint in its place); open it "
      "again"));
}

// This rank's source: with at least the folder's ranks, the DTensors of its own rank file
// (on the folder's mesh, whose ranks 0..W-1 are the communicator's); with fewer,
// ShardedTensors whose boxes are every rank file's pieces (rank file f on rank f mod n),
// holding the pieces of the files this rank reads. `stats` gets the bytes and files read.
absl::StatusOr<Map> SourceOf(const std::string& dir, const ShardedCheckpointIndex& index,
                             int64_t me, int64_t n, LoadStats& stats) {
  std::vector<RankShards> files;
  for (int64_t f = me; f < index.world_size; f += n) {
    SDRT_ASSIGN_OR_RETURN(RankShards shards, LoadRankShards(dir, f));
    SDRT_RETURN_IF_ERROR(SameIndex(dir, index, shards.index));
    for (const auto& [name, d] : shards.tensors) stats.bytes_read += d.local().nbytes();
    ++stats.reads;
    files.push_back(std::move(shards));
  }
  if (index.world_size <= n) return files.empty() ? Map() : files.front().ToStateDict();
  Map source;
  source.Reserve(index.tensors.size());
  for (size_t t = 0; t < index.tensors.size(); ++t) {
    const ShardedCheckpointTensor& tensor = index.tensors[t];
    std::vector<ShardMetadata> boxes;
    boxes.reserve(static_cast<size_t>(index.world_size));
    for (int64_t f = 0; f < index.world_size; ++f) {
      SDRT_ASSIGN_OR_RETURN(
          const LocalShardInfo info,
          ComputeLocalShapeAndGlobalOffset(tensor.shape, *index.mesh, tensor.placements, f));
      if (!info.is_slice) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": tensor '", tensor.name, "' is ", PlacementsToString(tensor.placements),
            ", whose pieces are not boxes; load the folder with ", index.world_size,
            " ranks or more (one rank per rank file), not ", n));
      }
      boxes.push_back({info.global_offset, info.local_shape, {f % n, Device::CPU()}});
    }
    std::vector<LocalShard> mine;
    for (const RankShards& file : files) {
      mine.push_back({file.tensors[t].second.local(), boxes[static_cast<size_t>(file.rank)]});
    }
    SDRT_ASSIGN_OR_RETURN(ShardedTensor st,
                          ShardedTensor::Make(tensor.shape, tensor.dtype, boxes, std::move(mine)));
    source.Set(tensor.name, Value(std::move(st)));
  }
  return source;
}

bool HasPartial(const Value& leaf) {
  return leaf.kind() == ValueKind::kDTensor &&
         std::any_of(leaf.as_dtensor().placements().begin(), leaf.as_dtensor().placements().end(),
                     [](const Placement& p) { return p.is_partial(); });
}

// The reshard destination of a leaf that names a folder tensor: the leaf itself when it is
// a tensor of any kind and the folder's is not 0-dim, else a meta plain tensor of the
// folder tensor's shape (replaced by the full tensor, as the other reads replace a scalar
// and any leaf of a 0-dim tensor). A DTensor's Partial mesh dims are Replicate here (the
// reshard moves values); WithPartials gives them back.
absl::StatusOr<Value> DestinationOf(const Value& leaf, const ShardedCheckpointTensor& tensor) {
  if (!leaf.is_any_tensor() || tensor.shape.empty()) {
    SDRT_ASSIGN_OR_RETURN(Tensor meta, Tensor::Meta(tensor.shape, tensor.dtype));
    return Value(std::move(meta));
  }
  if (!HasPartial(leaf)) return leaf;
  const DTensor& d = leaf.as_dtensor();
  std::vector<Placement> placements = d.placements();
  for (Placement& p : placements) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  SDRT_ASSIGN_OR_RETURN(DTensor replicated,
                        DTensor::Make(d.local(), d.mesh(), std::move(placements), d.global_shape(),
                                      d.global_stride()));
  return Value(std::move(replicated));
}

// A folder whose metadata records an engine's layout (kEngineLayoutMetadataKey) fills that
// layout alone: `leaf` must be a DTensor of the folder tensor's placements on a mesh of the
// folder's shape (a 0-dim tensor is whole on any). InvalidArgument naming both otherwise.
absl::Status CheckEngineLayout(const ShardedCheckpointIndex& index,
                               const ShardedCheckpointTensor& tensor, const Value& leaf) {
  const auto recorded = index.metadata.find(kEngineLayoutMetadataKey);
  if (recorded == index.metadata.end() || tensor.shape.empty()) return absl::OkStatus();
  const std::string folder_layout =
      absl::StrCat(PlacementsToString(tensor.placements), " on mesh ",
                   absl::StrJoin(index.mesh->shape(), "x"));
  std::string asked = "a tensor that is not a DTensor";
  if (leaf.kind() == ValueKind::kDTensor) {
    const DTensor& d = leaf.as_dtensor();
    if (d.mesh()->shape() == index.mesh->shape() && d.placements() == tensor.placements) {
      return absl::OkStatus();
    }
    asked = absl::StrCat(PlacementsToString(d.placements()), " on mesh ",
                         absl::StrJoin(d.mesh()->shape(), "x"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      kOp, ": ", index.dir, " holds an engine's layout for ", recorded->second, " (__metadata__ \"",
      kEngineLayoutMetadataKey, "\": its fused tensors hold each rank's parts): '", tensor.name,
      "' is ", folder_layout, " there, asked for ", asked,
      "; fill that layout, or map the full checkpoint again"));
}

// The leaf `partial` (a DTensor with Partial mesh dims) with the local the reshard filled,
// holding the reduction's identity on a rank off coordinate 0 of a Partial dim, as
// BroadcastStateDict leaves it (FillPartialIdentity).
absl::StatusOr<Value> WithPartials(const DTensor& partial, const Value& filled, int64_t rank) {
  Tensor local = filled.as_dtensor().local();
  const std::optional<IntVector> coordinate = partial.mesh()->Coordinate(rank);
  if (!coordinate.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": ", partial.ToString(), " is not on a mesh holding rank ", rank));
  }
  SDRT_RETURN_IF_ERROR(
      FillPartialIdentity(local, *partial.mesh(), partial.placements(), *coordinate));
  SDRT_ASSIGN_OR_RETURN(DTensor d, partial.WithLocal(std::move(local)));
  return Value(std::move(d));
}

// This rank's error before the reshard, besides `precondition`: options that do not apply
// to a sharded folder (the agreement puts kOp and the rank before it).
absl::Status CheckShardedOptions(const LoadOptions& options, const Communicator& comm) {
  if (options.rank >= 0 && options.rank != comm.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " is not the communicator's rank ", comm.rank(),
                     " (an sdrt sharded folder is loaded by the communicator's ranks)"));
  }
  if (options.direct_io) {
    return absl::InvalidArgumentError(
        "direct_io does not apply to an sdrt sharded folder (its rank files are mapped)");
  }
  if (!options.device.is_cpu()) {
    return absl::UnimplementedError(absl::StrCat(
        "an sdrt sharded folder fills CPU tensors only, not ", options.device.ToString()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadResult> LoadShardedFolder(const CheckpointSource* source,
                                             const absl::Status& precondition, Map& local,
                                             const LoadOptions& options, LoadStats& stats) {
  Communicator& comm = *options.comm;
  absl::Status local_error = precondition;
  if (local_error.ok()) local_error = CheckShardedOptions(options, comm);
  const ShardedCheckpointIndex* index = source != nullptr ? source->sharded_index() : nullptr;
  MutableLeaves leaves;
  if (local_error.ok()) {
    absl::StatusOr<MutableLeaves> collected = CollectMutableLeaves(local);
    local_error = collected.status();
    if (collected.ok()) leaves = *std::move(collected);
  }
  LoadResult result;
  Map destination;  // path -> destination value, for the leaves the folder fills
  std::vector<int> matched(leaves.size(), 0);  // 0: missing, 1: filled, 2: None (kept)
  if (local_error.ok()) {
    absl::flat_hash_map<absl::string_view, bool> named;
    named.reserve(leaves.size());
    const auto by_name = index->ByName();
    for (size_t i = 0; i < leaves.size() && local_error.ok(); ++i) {
      const auto found = by_name.find(leaves[i].path);
      const ShardedCheckpointTensor* tensor = found == by_name.end() ? nullptr : found->second;
      if (tensor == nullptr) {
        result.missing_keys.emplace_back(leaves[i].path);
        continue;
      }
      named.emplace(tensor->name, true);
      if (leaves[i].value->is_none()) {
        matched[i] = 2;
        continue;
      }
      matched[i] = 1;
      // A path two leaves spell alike is filled once; both get the result.
      if (destination.Find(leaves[i].path) != nullptr) continue;
      local_error = CheckEngineLayout(*index, *tensor, *leaves[i].value);
      if (!local_error.ok()) break;
      absl::StatusOr<Value> value = DestinationOf(*leaves[i].value, *tensor);
      local_error = value.status();
      if (value.ok()) destination.Set(std::string(leaves[i].path), *std::move(value));
    }
    for (const ShardedCheckpointTensor& t : index->tensors) {
      if (!named.contains(t.name)) result.unexpected_keys.push_back(t.name);
    }
  }
  Map pieces;  // the reshard's source: this rank's rank files
  if (local_error.ok()) {
    absl::StatusOr<Map> s = SourceOf(index->dir, *index, comm.rank(), comm.size(), stats);
    local_error = s.status();
    if (s.ok()) pieces = *std::move(s);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, local_error));

  ReshardOptions reshard;
  reshard.comm = &comm;
  reshard.bucket_bytes = options.bucket_bytes;
  reshard.progress = options.progress;
  SDRT_RETURN_IF_ERROR(ReshardStateDict(pieces, destination, reshard, &stats.transfer));
  pieces = Map();  // unmaps the rank files

  for (size_t i = 0; i < destination.size(); ++i) {
    stats.bytes_kept += LocalBytes(destination.value(i));
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (matched[i] != 1) continue;
    const Value& filled = *destination.Find(leaves[i].path);
    if (!HasPartial(*leaves[i].value)) {
      *leaves[i].value = filled;
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(*leaves[i].value,
                          WithPartials(leaves[i].value->as_dtensor(), filled, comm.rank()));
  }
  if (options.strict) {
    std::vector<bool> erase(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) erase[i] = matched[i] == 0;
    EraseLeaves(leaves, erase);
  }
  return result;
}

int64_t LocalBytes(const Value& value) {
  switch (value.kind()) {
    case ValueKind::kDTensor:
      return value.as_dtensor().local().nbytes();
    case ValueKind::kShardedTensor: {
      int64_t bytes = 0;
      for (const LocalShard& s : value.as_sharded().local_shards()) bytes += s.tensor.nbytes();
      return bytes;
    }
    case ValueKind::kTensor:
      return value.as_tensor().nbytes();
    default:
      return 0;
  }
}

}  // namespace sdrt::internal
