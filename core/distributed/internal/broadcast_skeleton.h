// The skeleton a broadcast root sends before any tensor bytes, as the payload of the first
// agreement (core/distributed/agreement.h): every leaf of the full state dict in order,
// tensors as (dtype, shape), 0-dim tensors and non-tensor values inline. CBOR
// (nlohmann::json). Not public API.
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

// The root's encoding of `full`: its leaves in walk order (internal/leaves.h); on success
// `tensors` receives, per tensor entry, the root's tensor. Errors name the leaf's path:
// FailedPrecondition for a meta tensor; InvalidArgument for a leaf that cannot be
// broadcast (a DTensor or ShardedTensor, an Opaque) and for too deep a nesting.
absl::StatusOr<std::string> EncodeBroadcastSkeleton(const Map& full, std::vector<Tensor>* tensors);

// Decodes what EncodeBroadcastSkeleton made. The bytes come from another rank and are not
// trusted: every member's presence and type is checked, nothing throws, and bytes that
// are not a skeleton are InvalidArgument ("broadcast skeleton: ...").
absl::StatusOr<std::vector<SkeletonEntry>> DecodeBroadcastSkeleton(const std::string& bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_
