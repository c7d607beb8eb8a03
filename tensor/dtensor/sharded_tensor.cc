#include "sdrt/tensor/dtensor/sharded_tensor.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

std::string RemoteDevice::ToString() const {
  return absl::StrCat("rank:", rank, "/", device.ToString());
}

absl::StatusOr<RemoteDevice> ParseRemoteDevice(absl::string_view text) {
  absl::string_view rest = text;
  const size_t slash = rest.find('/');
  RemoteDevice out;
  if (!absl::ConsumePrefix(&rest, "rank:") || slash == absl::string_view::npos ||
      !absl::SimpleAtoi(text.substr(5, slash - 5), &out.rank) || out.rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse shard placement '", text,
                                                   "' (want rank:R/cpu or rank:R/cuda:D)"));
  }
  SDRT_ASSIGN_OR_RETURN(out.device, ParseDevice(text.substr(slash + 1)));
  return out;
}

absl::StatusOr<std::vector<ShardMetadata>> ChunkShardingSpec(
    int dim, const std::vector<RemoteDevice>& placements, IntSpan global_shape) {
  const int ndim = static_cast<int>(global_shape.size());
  if (dim < 0 || dim >= ndim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ChunkShardingSpec: dim ", dim, " out of range for shape ", ShapeToString(global_shape)));
  }
  if (placements.empty()) return absl::InvalidArgumentError("ChunkShardingSpec: no placements");
  const int64_t n = global_shape[dim];
  const int64_t m = static_cast<int64_t>(placements.size());
  const int64_t split = n / m + (n % m != 0 ? 1 : 0);
  std::vector<ShardMetadata> shards;
  shards.reserve(placements.size());
  for (int64_t i = 0; i < m; ++i) {
    ShardMetadata shard;
    shard.offsets.assign(ndim, 0);
    shard.sizes.assign(global_shape.begin(), global_shape.end());
    shard.offsets[dim] = split * i;
    shard.sizes[dim] = std::max<int64_t>(std::min(n, split * (i + 1)) - split * i, 0);
    shard.placement = placements[i];
    shards.push_back(std::move(shard));
  }
  return shards;
}

std::string ShardMetadata::ToString() const {
  return absl::StrCat("offsets=", ShapeToString(offsets), " sizes=", ShapeToString(sizes), " ",
                      placement.ToString());
}

absl::StatusOr<ShardedTensor> ShardedTensor::Make(IntVector global_shape, DType dtype,
                                                  std::vector<ShardMetadata> shards_metadata,
                                                  std::vector<LocalShard> local_shards) {
  SDRT_RETURN_IF_ERROR(CheckedNumel(global_shape).status());
  auto check = [&](const ShardMetadata& m, const std::string& what) -> absl::Status {
    if (m.offsets.size() != global_shape.size() || m.sizes.size() != global_shape.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ShardedTensor: ", what, " (", m.ToString(),
                                                     ") does not match global shape ",
                                                     ShapeToString(global_shape)));
    }
    for (size_t d = 0; d < global_shape.size(); ++d) {
      if (m.offsets[d] < 0 || m.sizes[d] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("ShardedTensor: ", what, " (", m.ToString(), ") has a negative entry"));
      }
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < shards_metadata.size(); ++i) {
    SDRT_RETURN_IF_ERROR(check(shards_metadata[i], absl::StrCat("shard ", i)));
  }
  for (size_t i = 0; i < local_shards.size(); ++i) {
    const LocalShard& shard = local_shards[i];
    SDRT_RETURN_IF_ERROR(check(shard.metadata, absl::StrCat("local shard ", i)));
    if (!shard.tensor.defined() || shard.tensor.dtype() != dtype ||
        shard.tensor.shape() != shard.metadata.sizes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ShardedTensor: local shard ", i, " is ", shard.tensor.ToString(),
          " but its metadata says ", DTypeName(dtype), ShapeToString(shard.metadata.sizes)));
    }
  }
  ShardedTensor out;
  out.global_shape_ = std::move(global_shape);
  out.dtype_ = dtype;
  out.shards_metadata_ = std::move(shards_metadata);
  out.local_shards_ = std::move(local_shards);
  return out;
}

absl::StatusOr<ShardedTensor> ShardedTensor::WithLocalTensors(std::vector<Tensor> tensors) const {
  if (tensors.size() != local_shards_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedTensor::WithLocalTensors: ", tensors.size(), " tensors for ",
                     local_shards_.size(), " local shards"));
  }
  std::vector<LocalShard> shards = local_shards_;
  for (size_t i = 0; i < shards.size(); ++i) shards[i].tensor = std::move(tensors[i]);
  return Make(global_shape_, dtype_, shards_metadata_, std::move(shards));
}

std::string ShardedTensor::ToString() const {
  return absl::StrCat("ShardedTensor(", DTypeName(dtype_), ShapeToString(global_shape_), ", ",
                      shards_metadata_.size(), " shards, ", local_shards_.size(), " local)");
}

}  // namespace sdrt
