// Where one checkpoint tensor goes in a rank's local state dict: the plan of the leaf it
// fills (a fresh or preallocated DTensor local, the local shards of a ShardedTensor, or a
// plain tensor that replaces the leaf) and, once its bytes are in, the write back into the
// tree. Shared by BroadcastStateDict (broadcast_state_dict.cc) and LoadStateDict
// (load_state_dict.cc), which fill the same targets from different sources.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOCAL_TARGET_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOCAL_TARGET_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

struct LocalTarget {
  enum class Kind { kReplace, kFreshDTensor, kInPlaceDTensor, kSharded };
  Kind kind = Kind::kReplace;
  MutableLeaf* leaf = nullptr;
  // A DTensor leaf with a Partial placement (its local gets the reduction's identity off
  // coordinate 0), known from planning so the later steps need not reach the leaf again.
  bool partial = false;
  // Tensors written (one per local shard for kSharded), and per dest the global runs it
  // holds: a DTensor's those of its layout in the call's LocalLayoutCache (nothing copied
  // or allocated per tensor), any other target's in owned_runs, whose elements never move
  // (moving a target keeps them where they are).
  absl::InlinedVector<Tensor, 1> dests;
  absl::InlinedVector<const ShardRuns*, 1> runs;
  std::vector<ShardRuns> owned_runs;
};

// A hash of `dtensor`'s layout: its mesh's address, global shape and placements (FNV-1a).
// The key of the per-call caches of what a layout determines (LocalLayoutCache and
// GatherStateDict's local-shape check); entries still compare the fields themselves.
uint64_t HashLayout(const DTensor& dtensor);

// What a DTensor layout (mesh, placements, global shape, dtype) gives a rank, worked out
// once per call and shared by the tensors of that layout (10,000 tensors of a state dict
// have a few dozen layouts): the byte-cut check, the local shape and the global runs owned.
// Keyed by layout and rank (reading once per node asks it for the node's other ranks too).
class LocalLayoutCache {
 public:
  struct Layout {
    LocalShardInfo info;
    ShardRuns runs;
    bool partial = false;  // a placement is Partial
  };
  LocalLayoutCache();
  ~LocalLayoutCache();
  // The layout of `d` (whose dtype and global shape are checkpoint tensor `name`'s) on
  // `rank`, computed on first use; errors (not cached): CheckShardingCutsWholeBytes's and
  // ComputeLocalShapeAndGlobalOffset's. The pointer lives as long as the cache.
  absl::StatusOr<const Layout*> Get(absl::string_view name, const DTensor& d, int rank);

 private:
  struct Entry;
  absl::flat_hash_map<uint64_t, std::vector<std::unique_ptr<Entry>>> entries_;
};

// What a target may be, beyond the leaf itself.
struct LocalTargetRules {
  int rank = 0;  // this rank in the DTensors' meshes
  // With a communicator, its size: a DTensor's mesh holds only ranks below it and, with
  // `spans`, every one of them; nullopt: any mesh that holds `rank`.
  std::optional<int> mesh_ranks;
  bool spans = false;
  Device device = Device::CPU();  // where new tensors are allocated
  // false: new tensors are not allocated but left as meta tensors of their shape and
  // dtype, for the caller to allocate (LoadStateDict's one arena, internal/fresh_arena.h).
  bool allocate = true;
  // The call's layouts, shared by its DTensors; null: each works its own out.
  LocalLayoutCache* layouts = nullptr;
  // A DTensor or ShardedTensor leaf of another float dtype than the checkpoint's (both of
  // CastKind kFloat, tensor/dtype.h) is a target in its own dtype, the caller converting
  // (LoadStateDict's kAll); else it is refused.
  bool allow_cast = false;
};

// Plans into `target` (default-constructed: filled in place, never moved) the target of
// checkpoint tensor `name` (`dtype`, global `shape`) in `leaf`, and allocates the new
// tensors it needs (before any data moves; see rules.allocate). A DTensor leaf of a tensor
// of dimension >= 1 gets its local (fresh on rules.device when the local is meta, else the
// local itself, whose shape must be the rank's local shape); a ShardedTensor leaf its local
// shards (each within the global shape, none on meta); anything else, and every 0-dim
// tensor, a new tensor of the full shape that replaces the leaf. InvalidArgument naming the
// tensor for a dtype (but a cast that rules.allow_cast allows) or global shape that differs
// from the checkpoint's, a mesh without this rank or of another size, a local or shard that
// does not fit; FailedPrecondition for a meta shard; ResourceExhausted when an allocation
// fails. On an error `target` is partly filled and must not be committed.
absl::Status PlanLocalTarget(absl::string_view name, DType dtype, IntSpan shape, MutableLeaf& leaf,
                             const LocalTargetRules& rules, LocalTarget& target);

// The new DTensors of one call's commits (a kFreshDTensor target's), made in one
// allocation of room for `count` (the call's targets: room the other targets leave unused
// is reserved, never touched) instead of one each, on the first Make: every Value made
// shares it, as the fresh locals share one arena (fresh_arena.h), and its memory goes when
// the last of them is gone. Past `count`, a further allocation of the same room. `count`
// 0: each Value is an allocation of its own, for locals that are not views of one arena
// (one block would keep every one of them alive as long as any).
class FreshDTensors {
 public:
  explicit FreshDTensors(size_t count);
  // A Value holding `d`, which moves into the block.
  Value Make(DTensor d);

 private:
  size_t count_;
  std::shared_ptr<std::vector<DTensor>> block_;
};

// Writes a filled target back into its leaf: the tensor replaces a kReplace leaf, a fresh
// local becomes a DTensor with the leaf's mesh and placements, and DTensor locals get the
// identity of their Partial mesh dims on ranks off coordinate 0 (FillPartialIdentity).
// A fresh local is moved out of target.dests into the tree, its DTensor made in `made`.
absl::Status CommitLocalTarget(LocalTarget& target, int rank, FreshDTensors& made);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOCAL_TARGET_H_
