// ShardedTensor: PyTorch's legacy sharded type (torch.distributed._shard), as metadata
// plus this rank's local shards. Each shard is described by ShardMetadata: its global
// offsets and sizes and a placement string "rank:R/cpu" or "rank:R/cuda:D".
#ifndef SDRT_TENSOR_DTENSOR_SHARDED_TENSOR_H_
#define SDRT_TENSOR_DTENSOR_SHARDED_TENSOR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// "rank:1/cuda:1" parsed.
struct RemoteDevice {
  int64_t rank = 0;
  Device device;
  std::string ToString() const;  // "rank:1/cuda:1"
};
absl::StatusOr<RemoteDevice> ParseRemoteDevice(absl::string_view text);

struct ShardMetadata {
  IntVector offsets;  // elements, one per dim
  IntVector sizes;    // elements, one per dim
  RemoteDevice placement;
  std::string ToString() const;  // "offsets=[5, 0] sizes=[5, 10] rank:1/cpu"
};

struct LocalShard {
  Tensor tensor;
  ShardMetadata metadata;
};

// The shard metadata of torch.distributed._shard's ChunkShardingSpec(dim, placements)
// for a tensor of `global_shape`: with m = placements.size() and split = ceil(n / m) for
// n = global_shape[dim], shard i has offset split * i along `dim` (0 elsewhere) and size
// max(min(n, split * (i + 1)) - split * i, 0) along `dim` (full elsewhere), on
// placements[i]. Trailing shards may be empty and their offsets may exceed n, exactly as
// PyTorch makes them. InvalidArgument for a dim out of range or no placements.
absl::StatusOr<std::vector<ShardMetadata>> ChunkShardingSpec(
    int dim, const std::vector<RemoteDevice>& placements, IntSpan global_shape);

class ShardedTensor {
 public:
  // Validates: offsets/sizes of every shard have the global rank and are >= 0 (sizes may
  // be 0; offsets of trailing empty shards may exceed the dim size, as ChunkShardingSpec
  // makes them); every local shard's tensor has its metadata's sizes and `dtype`.
  // InvalidArgument naming the shard otherwise.
  static absl::StatusOr<ShardedTensor> Make(IntVector global_shape, DType dtype,
                                            std::vector<ShardMetadata> shards_metadata,
                                            std::vector<LocalShard> local_shards);

  ShardedTensor() = default;
  const IntVector& global_shape() const { return global_shape_; }
  DType dtype() const { return dtype_; }
  const std::vector<ShardMetadata>& shards_metadata() const { return shards_metadata_; }
  const std::vector<LocalShard>& local_shards() const { return local_shards_; }

  // The same metadata with other local shard tensors (one per local shard, same shapes
  // and dtype), e.g. CPU copies. InvalidArgument when counts, shapes or dtypes differ.
  absl::StatusOr<ShardedTensor> WithLocalTensors(std::vector<Tensor> tensors) const;

  // "ShardedTensor(float32[20, 10], 4 shards, 1 local)".
  std::string ToString() const;

 private:
  IntVector global_shape_;
  DType dtype_ = DType::kFloat32;
  std::vector<ShardMetadata> shards_metadata_;
  std::vector<LocalShard> local_shards_;
};

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTENSOR_SHARDED_TENSOR_H_
