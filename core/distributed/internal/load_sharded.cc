// LoadShardedCheckpoint (core/distributed/load_state_dict.h): an sdrt sharded folder into
// any layout, as a reshard from the folder's own layout. Each rank maps only the rank files
// it is given (f mod N); the folder's pieces are the reshard's sources, `local`'s matched
// leaves its destinations.
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "LoadShardedCheckpoint";

// This rank's source: with at least the folder's ranks, the DTensors of its own rank file
// (on the folder's mesh, whose ranks 0..W-1 are the communicator's); with fewer,
// ShardedTensors whose boxes are every rank file's pieces (rank file f on rank f mod n),
// holding the pieces of the files this rank reads. `stats` gets the bytes and files read.
absl::StatusOr<Map> SourceOf(const std::string& dir, const ShardedCheckpointIndex& index,
                             int64_t me, int64_t n, LoadStats& stats) {
  std::vector<RankShards> files;
  for (int64_t f = me; f < index.world_size; f += n) {
    SDRT_ASSIGN_OR_RETURN(RankShards shards, LoadRankShards(dir, f));
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

// The reshard destination of a leaf that names a folder tensor: the leaf itself when it is
// a tensor of any kind, else a meta plain tensor of the folder tensor's shape (replaced by
// the full tensor, as LoadStateDict replaces a scalar).
absl::StatusOr<Value> DestinationOf(const Value& leaf, const ShardedCheckpointTensor& tensor) {
  if (leaf.is_any_tensor()) return leaf;
  SDRT_ASSIGN_OR_RETURN(Tensor meta, Tensor::Meta(tensor.shape, tensor.dtype));
  return Value(std::move(meta));
}

}  // namespace

absl::StatusOr<LoadResult> LoadShardedCheckpoint(const std::string& dir, Map& local,
                                                 const LoadShardedOptions& options) {
  if (options.comm == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(kOp, ": a communicator is required (the folder's pieces move between "
                          "ranks)"));
  }
  Communicator& comm = *options.comm;
  LoadStats local_stats;
  LoadStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = LoadStats{};

  ReadShardedCheckpointOptions read_options;
  read_options.check_rank_files = false;  // each rank checks the files it opens
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(dir, read_options);
  absl::Status local_error = index.status();
  internal::MutableLeaves leaves;
  if (local_error.ok()) {
    absl::StatusOr<internal::MutableLeaves> collected =
        internal::CollectMutableLeaves(local);
    local_error = collected.status();
    if (collected.ok()) leaves = *std::move(collected);
  }
  LoadResult result;
  Map destination;       // path -> destination value, for the leaves the folder fills
  std::vector<int> matched(leaves.size(), 0);  // 0: missing, 1: filled, 2: None (kept)
  if (local_error.ok()) {
    absl::flat_hash_map<absl::string_view, bool> named;
    named.reserve(leaves.size());
    for (size_t i = 0; i < leaves.size() && local_error.ok(); ++i) {
      const ShardedCheckpointTensor* tensor = index->Find(leaves[i].path);
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
      absl::StatusOr<Value> value = DestinationOf(*leaves[i].value, *tensor);
      local_error = value.status();
      if (value.ok()) destination.Set(std::string(leaves[i].path), *std::move(value));
    }
    for (const ShardedCheckpointTensor& t : index->tensors) {
      if (!named.contains(t.name)) result.unexpected_keys.push_back(t.name);
    }
  }
  Map source;
  if (local_error.ok()) {
    absl::StatusOr<Map> s = SourceOf(dir, *index, comm.rank(), comm.size(), stats);
    local_error = s.status();
    if (s.ok()) source = *std::move(s);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, local_error));

  ReshardOptions reshard;
  reshard.comm = &comm;
  reshard.bucket_bytes = options.bucket_bytes;
  SDRT_RETURN_IF_ERROR(ReshardStateDict(source, destination, reshard, options.reshard_stats));
  source = Map();  // unmaps the rank files

  for (size_t i = 0; i < destination.size(); ++i) {
    const Value& filled = destination.value(i);
    if (filled.kind() == ValueKind::kDTensor) {
      stats.bytes_kept += filled.as_dtensor().local().nbytes();
    } else if (filled.kind() == ValueKind::kShardedTensor) {
      for (const LocalShard& s : filled.as_sharded().local_shards()) {
        stats.bytes_kept += s.tensor.nbytes();
      }
    } else {
      stats.bytes_kept += filled.as_tensor().nbytes();
    }
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (matched[i] == 1) *leaves[i].value = *destination.Find(leaves[i].path);
  }
  if (options.strict) {
    std::vector<bool> erase(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) erase[i] = matched[i] == 0;
    internal::EraseLeaves(leaves, erase);
  }
  return result;
}

}  // namespace sdrt
