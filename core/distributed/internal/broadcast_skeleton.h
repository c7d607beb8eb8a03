// The skeleton a broadcast root sends before any tensor bytes, as the payload of the first
// agreement (core/distributed/agreement.h): every leaf of the full state dict in order,
// tensors as (dtype, shape) in fixed-width words, 0-dim tensors and non-tensor values
// inline as CBOR (nlohmann::json; they are few). The binary form costs a few words per
// tensor to write and read, where a CBOR document of every entry cost microseconds per
// tensor. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

struct SkeletonEntry {
  absl::string_view path;  // a view of the decoded bytes
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

// Decodes what EncodeBroadcastSkeleton made; the entries' paths view `bytes`, which must
// outlive them. The bytes come from another rank and are not trusted: every length and
// count is checked against what arrived (a count is bounded by the bytes left before
// anything is allocated for it), nothing throws, and bytes that are not a skeleton are
// InvalidArgument ("broadcast skeleton: ...").
absl::StatusOr<std::vector<SkeletonEntry>> DecodeBroadcastSkeleton(absl::string_view bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SKELETON_H_
