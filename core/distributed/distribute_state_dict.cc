// DistributeStateDict (core/distributed/distributed_state_dict.h): every rank holds the full state
// dict and keeps its own pieces; no data moves between ranks.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/region_copy.h"
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
    return CheckShardingCutsWholeBytes(path, dtype, global, *d.mesh(), d.placements());
  }
  for (const LocalShard& s : local.as_sharded().local_shards()) {
    SDRT_RETURN_IF_ERROR(
        CheckBoxCutsWholeBytes(path, dtype, global, s.metadata.offsets, s.metadata.sizes));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Distribute(const Tensor& full, const Value& local, int rank,
                                 const std::optional<Device>& device) {
  if (local.kind() == ValueKind::kDTensor) {
    const DTensor& d = local.as_dtensor();
    SDRT_ASSIGN_OR_RETURN(DTensor piece, DistributeTensor(full, d.mesh(), d.placements(), rank));
    Tensor mine = piece.local();
    const Device target =
        device.value_or(d.local().device().is_meta() ? Device::CPU() : d.local().device());
    if (mine.device() != target) {
      SDRT_ASSIGN_OR_RETURN(mine, mine.To(target));
    }
    SDRT_ASSIGN_OR_RETURN(DTensor result, DTensor::Make(std::move(mine), d.mesh(), d.placements(),
                                                        d.global_shape(), d.global_stride()));
    return Value(std::move(result));
  }
  if (local.kind() == ValueKind::kShardedTensor) {
    const IntVector origin(full.shape().size(), 0);
    for (const LocalShard& s : local.as_sharded().local_shards()) {
      SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, s.tensor,
                                    BoxRuns(s.metadata.offsets, s.metadata.sizes),
                                    /*to_local=*/true));
    }
    return local;
  }
  const Device target =
      device.value_or(local.kind() == ValueKind::kTensor && !local.as_tensor().device().is_meta()
                          ? local.as_tensor().device()
                          : full.device());
  if (full.device() == target) return Value(full);
  SDRT_ASSIGN_OR_RETURN(Tensor moved, full.To(target));
  return Value(std::move(moved));
}

}  // namespace

absl::Status DistributeStateDict(const Map& full, Map& local, const DistributeOptions& options) {
  if (options.rank < 0 && options.comm == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": give this process's rank or a communicator"));
  }
  const int rank = options.rank >= 0 ? options.rank : options.comm->rank();
  absl::StatusOr<internal::Leaves> full_leaves = internal::CollectLeaves(full);
  absl::StatusOr<internal::MutableLeaves> local_leaves =
      internal::CollectMutableLeaves(local);
  absl::Status error = full_leaves.ok() ? local_leaves.status() : full_leaves.status();

  // Validation first, so that nothing is written when some rank cannot go on.
  absl::flat_hash_map<absl::string_view, size_t> local_by_path;
  absl::flat_hash_map<absl::string_view, const Tensor*> full_tensors;
  if (error.ok()) {
    for (size_t i = 0; i < local_leaves->size(); ++i) {
      local_by_path.emplace((*local_leaves)[i].path, i);
    }
    for (const internal::Leaf& leaf : *full_leaves) {
      if (leaf.value->kind() == ValueKind::kTensor) {
        full_tensors.emplace(leaf.path, &leaf.value->as_tensor());
      }
    }
    for (const internal::MutableLeaf& leaf : *local_leaves) {
      const ValueKind kind = leaf.value->kind();
      if (kind != ValueKind::kDTensor && kind != ValueKind::kShardedTensor) continue;
      const auto it = full_tensors.find(leaf.path);
      if (it == full_tensors.end()) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank, " lacks key '", leaf.path, "' in its full state dict (", full.size(),
            " top-level keys), which its local ", ValueKindName(kind),
            " needs; when only one rank holds the full state dict, use BroadcastStateDict"));
        break;
      }
      // A 0-dim tensor replaces the local leaf whatever it is (written below).
      if (it->second->dim() > 0) error = CheckTensorLeaf(leaf.path, *it->second, *leaf.value);
      if (!error.ok()) break;
    }
  }
  if (options.comm != nullptr) {
    // Every rank must hold the same full state dict: its skeleton (paths, value kinds,
    // dtypes, shapes; not the values) is compared by hash in the same collective, so a key,
    // scalar or plain tensor on some ranks only is an error on every rank, not a silent
    // divergence (case-012).
    internal::AgreementDescriber describe;
    AgreementSkeleton skeleton;
    if (full_leaves.ok()) {
      skeleton.reserve(full_leaves->size());
      for (const internal::Leaf& leaf : *full_leaves) {
        skeleton.emplace_back(leaf.path, describe(*leaf.value));
      }
    }
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(*options.comm, kOp, "", skeleton, error));
  } else if (!error.ok()) {
    return absl::Status(error.code(), absl::StrCat(kOp, ": ", error.message()));
  }

  std::vector<std::pair<std::string, Value>> added;  // appended last: Set may move the values
  for (const internal::Leaf& leaf : *full_leaves) {
    const Value& v = *leaf.value;
    const auto it = local_by_path.find(leaf.path);
    Value* target = it == local_by_path.end() ? nullptr : (*local_leaves)[it->second].value;
    if (v.kind() == ValueKind::kTensor && v.as_tensor().dim() > 0) {
      if (target == nullptr || target->is_none()) continue;
      SDRT_ASSIGN_OR_RETURN(Value piece, Distribute(v.as_tensor(), *target, rank, options.device));
      *target = std::move(piece);
      continue;
    }
    Value value = v;
    if (v.is_any_tensor()) {
      SDRT_ASSIGN_OR_RETURN(value, internal::MoveToCpu(v));
    }
    if (target != nullptr) {
      *target = std::move(value);
    } else if (leaf.parent_map == &full) {
      added.emplace_back(leaf.key, std::move(value));  // added, as PyTorch does
    }
  }
  for (auto& [key, value] : added) local.Set(key, std::move(value));
  return absl::OkStatus();
}

}  // namespace sdrt
