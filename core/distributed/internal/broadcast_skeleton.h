// The skeleton a broadcast root sends before any tensor bytes: every leaf of the full
// state dict in order, tensors as (dtype, shape), 0-dim tensors and non-tensor values
// inline; or the root's error, so that every rank returns it. CBOR (nlohmann::json).
// Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

struct SkeletonEntry {
  std::string path;
  bool is_tensor = false;  // moved in buckets; else `value` travels inline
  DType dtype = DType::kFloat32;
  IntVector shape;
  Value value;  // non-tensor leaf, or 0-dim CPU tensor
};

// The root's encoding of `full`: its leaves in walk order (core/distributed/internal/leaves.h); on
// success `tensors` receives, per tensor entry, the root's tensor. A leaf that cannot be
// broadcast (a meta tensor, a DTensor or ShardedTensor, an Opaque) or too deep a nesting
// encodes the error instead (the return value is then an encoded error, not a failure).
std::string EncodeBroadcastSkeleton(const Map& full, std::vector<Tensor>* tensors);

// Decodes what EncodeBroadcastSkeleton made; an encoded error comes back as that error.
// DataLoss for bytes that are not a skeleton.
absl::StatusOr<std::vector<SkeletonEntry>> DecodeBroadcastSkeleton(const std::string& bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_
