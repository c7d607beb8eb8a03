// DistributeStateDict (core/distributed/distributed_state_dict.h): every rank holds the full state
// dict and keeps its own pieces. Each DTensor or ShardedTensor leaf is a transfer from the full
// tensor every rank holds into the leaf's layout (internal/engine/transfer.h), whose plan for a
// rank has only chunks to itself: copied without an exchange, so no data moves between ranks.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "DistributeStateDict";

bool SameShape(IntSpan a, IntSpan b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }

// Checks one checkpoint tensor against the local leaf it goes to.
absl::Status CheckTensorLeaf(absl::string_view path, const Tensor& full, const Value& local) {
  if (full.device().is_meta()) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "': the full state dict holds a meta tensor (no data)"));
  }
  DType dtype;
  IntVector global;
  if (local.kind() == ValueKind::kDTensor) {
    dtype = local.as_dtensor().dtype();
    global = local.as_dtensor().global_shape();
  } else if (local.kind() == ValueKind::kShardedTensor) {
    dtype = local.as_sharded().dtype();
    global = local.as_sharded().global_shape();
  } else {
    return absl::OkStatus();
  }
  if (dtype != full.dtype() || !SameShape(global, full.shape())) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': the local ", ValueKindName(local.kind()), " is ",
                     DTypeName(dtype), ShapeToString(global), " but the full state dict holds ",
                     DTypeName(full.dtype()), ShapeToString(full.shape())));
  }
  if (local.kind() == ValueKind::kDTensor) {
    const DTensor& d = local.as_dtensor();
    return internal::CheckShardingCutsWholeBytes(path, dtype, global, *d.mesh(), d.placements());
  }
  for (const LocalShard& s : local.as_sharded().local_shards()) {
    SDRT_RETURN_IF_ERROR(internal::CheckBoxCutsWholeBytes(path, dtype, global, s.metadata.offsets,
                                                          s.metadata.sizes));
  }
  return absl::OkStatus();
}

// A 1-D mesh over `ranks`, Replicate: the layout of a tensor each of those ranks holds
// whole, shared by the call's tensors of one mesh.
std::vector<Placement> AllReplicate(const DeviceMesh& mesh) {
  return std::vector<Placement>(static_cast<size_t>(mesh.ndim()), Placement::Replicate());
}

// The transfers of the call: for each full tensor (dimension >= 1) that reaches a DTensor or
// ShardedTensor leaf, from the full tensor (every rank holds it) into the leaf's layout.
// New DTensor locals go to `fresh` (CPU ones in one arena, in leaf order); ShardedTensor
// shards are written in place. `dtensor_of[i]` is the full leaf i's new local's index in
// `fresh`, or -1.
struct Distribution {
  std::vector<Tensor> fresh;
  std::vector<int64_t> fresh_of;
  internal::TransferRun run;
};

absl::Status PlanDistribution(const internal::Leaves& full_leaves,
                              const internal::MutableLeaves& local_leaves,
                              const std::vector<int64_t>& target, int rank,
                              const std::optional<Device>& device, Distribution& out) {
  std::vector<internal::TransferTensor> tensors;
  tensors.reserve(full_leaves.size());
  internal::TransferLocals sources, destinations;
  std::vector<size_t> reaching;  // full leaves with a transfer, in order
  out.fresh_of.assign(full_leaves.size(), -1);
  std::vector<internal::FreshPiece> cpu_pieces;
  std::vector<IntVector> cpu_shapes;
  // The last DTensor layout met and what it gives this rank (the mesh checked once, its
  // Replicate placements shared by the tensors on it).
  struct {
    const DeviceMesh* mesh = nullptr;
    std::vector<Placement> replicate;
    const std::vector<Placement>* placements = nullptr;
    IntVector shape;
    IntVector local_shape;
    int64_t numel = 0;
  } layout;
  Device site_device = Device::CPU();
  for (size_t i = 0; i < full_leaves.size(); ++i) {
    if (target[i] < 0) continue;
    const Value& v = *full_leaves[i].value;
    const Value& leaf = *local_leaves[static_cast<size_t>(target[i])].value;
    if (v.kind() != ValueKind::kTensor || v.as_tensor().dim() == 0 || !leaf.is_any_tensor() ||
        leaf.kind() == ValueKind::kTensor) {
      continue;
    }
    const Tensor& full = v.as_tensor();
    internal::TransferTensor t;
    t.name = std::string(full_leaves[i].path);
    t.dtype = full.dtype();
    t.shape = full.shape();
    if (leaf.kind() == ValueKind::kDTensor) {
      const DTensor& d = leaf.as_dtensor();
      // The local shape of a layout, worked out once for the tensors that repeat it.
      const bool same_mesh = layout.mesh == d.mesh().get();
      if (!same_mesh) {
        if (!d.mesh()->Coordinate(rank).has_value()) {
          return absl::InvalidArgumentError(absl::StrCat("'", full_leaves[i].path, "': rank ", rank,
                                                         " is not in ", d.mesh()->ToString()));
        }
        layout.mesh = d.mesh().get();
        layout.replicate = AllReplicate(*d.mesh());
      }
      if (!same_mesh || layout.shape != full.shape() || *layout.placements != d.placements()) {
        SDRT_ASSIGN_OR_RETURN(layout.local_shape,
                              ComputeLocalShape(full.shape(), *d.mesh(), d.placements(), rank));
        SDRT_ASSIGN_OR_RETURN(layout.numel, CheckedNumel(layout.local_shape));
        layout.placements = &d.placements();
        layout.shape = full.shape();
      }
      t.source.mesh = d.mesh();
      t.source.placements = layout.replicate;
      t.destination.mesh = d.mesh();
      t.destination.placements = d.placements();
      const Device to =
          device.value_or(d.local().device().is_meta() ? Device::CPU() : d.local().device());
      out.fresh_of[i] = static_cast<int64_t>(out.fresh.size());
      if (to.is_cpu()) {  // a view of the arena, below
        out.fresh.emplace_back();
        cpu_shapes.push_back(layout.local_shape);
        SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(full.dtype(), layout.numel));
        cpu_pieces.push_back({bytes, ElementAlignment(full.dtype())});
      } else {
        SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty(layout.local_shape, full.dtype(), to));
        out.fresh.push_back(std::move(local));
        site_device = to;
      }
    } else {
      const ShardedTensor& st = leaf.as_sharded();
      t.source.boxes = {{IntVector(full.shape().size(), 0), full.shape(), rank}};
      for (const LocalShard& shard : st.local_shards()) {
        t.destination.boxes.push_back({shard.metadata.offsets, shard.metadata.sizes, rank});
        if (!shard.tensor.device().is_cpu()) site_device = shard.tensor.device();
      }
    }
    if (!full.device().is_cpu()) site_device = full.device();
    tensors.push_back(std::move(t));
    reaching.push_back(i);
  }
  // The CPU locals as views of one arena (one allocation, not one per tensor).
  if (!cpu_pieces.empty()) {
    SDRT_ASSIGN_OR_RETURN(const internal::FreshLayout arena, internal::LayOutFresh(cpu_pieces));
    SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> storage,
                          Storage::AllocateCpu(arena.bytes));
    size_t k = 0;
    for (size_t i : reaching) {
      if (out.fresh_of[i] < 0 || out.fresh[out.fresh_of[i]].defined()) continue;
      SDRT_ASSIGN_OR_RETURN(
          out.fresh[out.fresh_of[i]],
          Tensor::AtByteOffset(storage, arena.offsets[k], full_leaves[i].value->as_tensor().dtype(),
                               cpu_shapes[k]));
      ++k;
    }
  }
  for (size_t i : reaching) {
    sources.Add({&full_leaves[i].value->as_tensor(), 1});
    const Value& leaf = *local_leaves[static_cast<size_t>(target[i])].value;
    if (out.fresh_of[i] >= 0) {
      destinations.Add({&out.fresh[out.fresh_of[i]], 1});
    } else {
      for (const LocalShard& shard : leaf.as_sharded().local_shards()) {
        destinations.tensors.push_back({&shard.tensor, nullptr});
      }
      destinations.begin.push_back(destinations.tensors.size());
    }
  }
  const int64_t ranks = std::numeric_limits<int32_t>::max();  // no exchange is made
  return out.run.PrepareLocal(internal::TransferSite(rank, ranks, site_device), std::move(tensors),
                              std::move(sources), std::move(destinations));
}

}  // namespace

absl::Status DistributeStateDict(const Map& full, Map& local, const DistributeOptions& options) {
  if (options.rank < 0 && options.comm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": give this process's rank or a communicator"));
  }
  const int rank = options.rank >= 0 ? options.rank : options.comm->rank();
  absl::StatusOr<internal::Leaves> full_leaves = internal::CollectLeaves(full);
  absl::StatusOr<internal::MutableLeaves> local_leaves = internal::CollectMutableLeaves(local);
  absl::Status error = full_leaves.ok() ? local_leaves.status() : full_leaves.status();

  // Validation first, so that nothing is written when some rank cannot go on.
  // target[i]: the local leaf full leaf i goes to (-1: none).
  std::vector<int64_t> target;
  if (error.ok()) {
    const auto path_of = [](const auto& leaf) { return leaf.path; };
    target = internal::MatchPaths(*full_leaves, *local_leaves, path_of);
    // Which local leaves a full tensor reaches: the first full leaf of a path, as a map
    // from paths would keep.
    std::vector<int64_t> source(local_leaves->size(), -1);
    for (size_t i = 0; i < full_leaves->size(); ++i) {
      if (target[i] < 0 || (*full_leaves)[i].value->kind() != ValueKind::kTensor) continue;
      int64_t& s = source[static_cast<size_t>(target[i])];
      if (s < 0) s = static_cast<int64_t>(i);
    }
    for (size_t j = 0; j < local_leaves->size() && error.ok(); ++j) {
      const internal::MutableLeaf& leaf = (*local_leaves)[j];
      const ValueKind kind = leaf.value->kind();
      if (kind != ValueKind::kDTensor && kind != ValueKind::kShardedTensor) continue;
      if (source[j] < 0) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank, " lacks key '", leaf.path, "' in its full state dict (", full.size(),
            " top-level keys), which its local ", ValueKindName(kind),
            " needs; when only one rank holds the full state dict, use BroadcastStateDict"));
        break;
      }
      const Tensor& t = (*full_leaves)[static_cast<size_t>(source[j])].value->as_tensor();
      // A 0-dim tensor replaces the local leaf whatever it is (written below).
      if (t.dim() > 0) error = CheckTensorLeaf(leaf.path, t, *leaf.value);
    }
  }
  // The transfers are planned and their locals allocated before the agreement, so that
  // every rank sees any rank's failure.
  Distribution distribution;
  if (error.ok()) {
    error =
        PlanDistribution(*full_leaves, *local_leaves, target, rank, options.device, distribution);
  }
  if (options.comm != nullptr) {
    // Every rank must hold the same full state dict: its skeleton (paths, value kinds,
    // dtypes, shapes; not the values) is compared by hash in the same collective, so a key,
    // scalar or plain tensor on some ranks only is an error on every rank, not a silent
    // divergence (case-012). The text is built only when the hashes differ.
    const HashedSkeleton skeleton =
        full_leaves.ok() ? internal::HashLeaves(*full_leaves) : HashedSkeleton();
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanksHashed(*options.comm, kOp, "", skeleton, error));
  } else if (!error.ok()) {
    return absl::Status(error.code(), absl::StrCat(kOp, ": ", error.message()));
  }
  SDRT_RETURN_IF_ERROR(distribution.run.Run(kOp, nullptr));

  std::vector<std::pair<std::string, Value>> added;  // appended last: Set may move the values
  for (size_t i = 0; i < full_leaves->size(); ++i) {
    const internal::Leaf& leaf = (*full_leaves)[i];
    const Value& v = *leaf.value;
    Value* const to =
        target[i] < 0 ? nullptr : (*local_leaves)[static_cast<size_t>(target[i])].value;
    if (v.kind() == ValueKind::kTensor && v.as_tensor().dim() > 0) {
      if (to == nullptr || to->is_none() || to->kind() == ValueKind::kShardedTensor) continue;
      if (distribution.fresh_of[i] >= 0) {
        // A DTensor: its new local, the Partial identity off coordinate 0 (case-014).
        const DTensor& d = to->as_dtensor();
        Tensor& mine = distribution.fresh[distribution.fresh_of[i]];
        SDRT_RETURN_IF_ERROR(
            FillPartialIdentity(mine, *d.mesh(), d.placements(), *d.mesh()->Coordinate(rank)));
        SDRT_ASSIGN_OR_RETURN(DTensor result, d.WithLocal(std::move(mine)));
        *to = Value(std::move(result));
        continue;
      }
      // Any other leaf: the full tensor on the device (an alias when already there).
      const Tensor& full_tensor = v.as_tensor();
      const Device device = options.device.value_or(to->kind() == ValueKind::kTensor &&
                                                            !to->as_tensor().device().is_meta()
                                                        ? to->as_tensor().device()
                                                        : full_tensor.device());
      if (full_tensor.device() == device) {
        *to = Value(full_tensor);
      } else {
        SDRT_ASSIGN_OR_RETURN(Tensor moved, full_tensor.To(device));
        *to = Value(std::move(moved));
      }
      continue;
    }
    Value value = v;
    if (v.is_any_tensor()) {
      SDRT_ASSIGN_OR_RETURN(value, internal::MoveToCpu(v));
    }
    if (to != nullptr) {
      *to = std::move(value);
    } else if (leaf.parent_map == &full) {
      added.emplace_back(leaf.key, std::move(value));  // added, as PyTorch does
    }
  }
  for (auto& [key, value] : added) local.Set(key, std::move(value));
  return absl::OkStatus();
}

}  // namespace sdrt
