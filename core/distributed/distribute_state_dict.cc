// DistributeStateDict (core/distributed/distributed_state_dict.h): every rank holds the full state
// dict and keeps its own pieces; no data moves between ranks.
#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
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
      SDRT_RETURN_IF_ERROR(internal::CopyRuns(
          full, origin, s.tensor, internal::BoxRuns(s.metadata.offsets, s.metadata.sizes),
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

// The DTensor leaves whose new local is a fresh CPU tensor of this call (the common case:
// CPU full tensors, CPU or meta locals): their pieces are laid out in one arena,
// allocated once, and written in place (DistributeTensorInto), which saves an allocation
// per tensor. `fresh[i]` gets the arena view of full leaf i (else stays undefined) and
// `infos[i]` its sharding.
absl::Status AllocateFreshLocals(const internal::Leaves& full_leaves,
                                 const internal::MutableLeaves& local_leaves,
                                 const std::vector<int64_t>& target, int rank,
                                 const std::optional<Device>& device, std::vector<Tensor>& fresh,
                                 std::vector<LocalShardInfo>& infos) {
  std::vector<internal::FreshPiece> pieces;
  std::vector<size_t> owners;
  infos.resize(full_leaves.size());
  for (size_t i = 0; i < full_leaves.size(); ++i) {
    if (target[i] < 0) continue;
    const Value& v = *full_leaves[i].value;
    const Value& leaf = *local_leaves[static_cast<size_t>(target[i])].value;
    if (v.kind() != ValueKind::kTensor || leaf.kind() != ValueKind::kDTensor) continue;
    const Tensor& full = v.as_tensor();
    const DTensor& d = leaf.as_dtensor();
    if (full.dim() == 0 || !full.device().is_cpu()) continue;
    const Device to =
        device.value_or(d.local().device().is_meta() ? Device::CPU() : d.local().device());
    if (!to.is_cpu()) continue;
    absl::StatusOr<LocalShardInfo> info =
        ComputeLocalShapeAndGlobalOffset(full.shape(), *d.mesh(), d.placements(), rank);
    if (!info.ok()) continue;  // DistributeTensor reports it
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(info->local_shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(full.dtype(), numel));
    pieces.push_back({bytes, ElementAlignment(full.dtype())});
    owners.push_back(i);
    infos[i] = *std::move(info);
  }
  if (pieces.empty()) return absl::OkStatus();
  SDRT_ASSIGN_OR_RETURN(const internal::FreshLayout layout, internal::LayOutFresh(pieces));
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> arena, Storage::AllocateCpu(layout.bytes));
  fresh.assign(full_leaves.size(), Tensor());
  for (size_t k = 0; k < owners.size(); ++k) {
    const size_t i = owners[k];
    SDRT_ASSIGN_OR_RETURN(fresh[i], Tensor::AtByteOffset(arena, layout.offsets[k],
                                                         full_leaves[i].value->as_tensor().dtype(),
                                                         infos[i].local_shape));
  }
  return absl::OkStatus();
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

  std::vector<Tensor> fresh;
  std::vector<LocalShardInfo> infos;
  SDRT_RETURN_IF_ERROR(AllocateFreshLocals(*full_leaves, *local_leaves, target, rank,
                                           options.device, fresh, infos));
  std::vector<std::pair<std::string, Value>> added;  // appended last: Set may move the values
  for (size_t i = 0; i < full_leaves->size(); ++i) {
    const internal::Leaf& leaf = (*full_leaves)[i];
    const Value& v = *leaf.value;
    Value* const to = target[i] < 0 ? nullptr : (*local_leaves)[static_cast<size_t>(target[i])].value;
    if (v.kind() == ValueKind::kTensor && v.as_tensor().dim() > 0) {
      if (to == nullptr || to->is_none()) continue;
      if (!fresh.empty() && fresh[i].defined()) {
        const DTensor& d = to->as_dtensor();
        SDRT_RETURN_IF_ERROR(
            DistributeTensorInto(v.as_tensor(), *d.mesh(), d.placements(), rank, fresh[i], &infos[i]));
        SDRT_ASSIGN_OR_RETURN(DTensor result, d.WithLocal(std::move(fresh[i])));
        *to = Value(std::move(result));
        continue;
      }
      SDRT_ASSIGN_OR_RETURN(Value piece, Distribute(v.as_tensor(), *to, rank, options.device));
      *to = std::move(piece);
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
