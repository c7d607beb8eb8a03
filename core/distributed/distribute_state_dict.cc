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
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
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

// Leaf `leaf` of the local state dict, a DTensor or ShardedTensor.
const Value& LeafValue(const internal::MutableLeaves& local_leaves, int64_t leaf) {
  return *local_leaves[static_cast<size_t>(leaf)].value;
}

// The words of one transfer of DistributeRequest for the route key: what its descriptor is
// made of (the full tensor's path, dtype and shape, the leaf's mesh and placements or its
// shards' boxes), so a repeated call makes no descriptor.
void AddTransferToKey(absl::string_view path, const Tensor& full, const Value& leaf,
                      internal::RouteKey& key) {
  key.Name(path);
  key.Word(static_cast<int64_t>(full.dtype()));
  key.Ints(full.shape());
  if (leaf.kind() == ValueKind::kDTensor) {
    const DTensor& d = leaf.as_dtensor();
    key.Mesh(d.mesh().get());
    key.Placements(d.placements());
    return;
  }
  key.Mesh(nullptr);
  key.Word(static_cast<int64_t>(leaf.as_sharded().local_shards().size()));
  for (const LocalShard& shard : leaf.as_sharded().local_shards()) {
    key.Ints(shard.metadata.offsets);
    key.Ints(shard.metadata.sizes);
  }
}

// The transfers of a call for the route cache (route_cache.h): for each full tensor
// (dimension >= 1) that reaches a DTensor or ShardedTensor leaf, from the full tensor every
// rank holds (Replicate on the leaf's mesh, or one box of this rank) into the leaf's layout.
// Its key words (AddTransferToKey of each, in order) are written by PlanDistribution in the
// one walk over the leaves it makes anyway: a second walk over 10,000 leaves, each a
// separate DTensor in memory, cost about 0.3 ms in cache misses.
class DistributeRequest final : public internal::TransferRequest {
 public:
  // `reaching`: the full leaves with a transfer, in order; `target` their local leaves;
  // `key` their words.
  DistributeRequest(const internal::Leaves& full_leaves, const internal::MutableLeaves& local_leaves,
                    const std::vector<int64_t>& target, const std::vector<size_t>& reaching,
                    const internal::RouteKey& key, int rank)
      : full_(full_leaves), local_(local_leaves), target_(target), reaching_(reaching), key_(key),
        rank_(rank) {}

  size_t size() const override { return reaching_.size(); }

  void AddToKey(internal::RouteKey& key) const override {
    key.Word(kTag);
    key.AppendDigestOf(key_);
  }

  absl::StatusOr<std::vector<internal::TransferTensor>> Describe() const override {
    std::vector<internal::TransferTensor> tensors(reaching_.size());
    const DeviceMesh* mesh = nullptr;
    std::vector<Placement> replicate;
    for (size_t k = 0; k < reaching_.size(); ++k) {
      const size_t i = reaching_[k];
      const Tensor& full = full_[i].value->as_tensor();
      internal::TransferTensor& t = tensors[k];
      t.name.assign(full_[i].path.data(), full_[i].path.size());
      t.dtype = full.dtype();
      t.shape = full.shape();
      const Value& leaf = LeafValue(local_, target_[i]);
      if (leaf.kind() == ValueKind::kDTensor) {
        const DTensor& d = leaf.as_dtensor();
        if (mesh != d.mesh().get()) {
          mesh = d.mesh().get();
          replicate.assign(static_cast<size_t>(mesh->ndim()), Placement::Replicate());
        }
        t.source.mesh = d.mesh();
        t.source.placements = replicate;
        t.destination.mesh = d.mesh();
        t.destination.placements.assign(d.placements().begin(), d.placements().end());
      } else {
        t.source.boxes.push_back({IntVector(full.shape().size(), 0), full.shape(), rank_});
        for (const LocalShard& shard : leaf.as_sharded().local_shards()) {
          t.destination.boxes.push_back({shard.metadata.offsets, shard.metadata.sizes, rank_});
        }
      }
    }
    return tensors;
  }

 private:
  static constexpr int64_t kTag = 0x5344525444495354;  // "SDRTDIST"
  const internal::Leaves& full_;
  const internal::MutableLeaves& local_;
  const std::vector<int64_t>& target_;
  const std::vector<size_t>& reaching_;
  const internal::RouteKey& key_;
  const int rank_;
};

// The transfers of the call (DistributeRequest) and their locals. New DTensor locals go to
// `fresh` (CPU ones in one arena, in leaf order), shaped as the plan says; ShardedTensor
// shards are written in place. `fresh_of[i]` is the full leaf i's new local's index in
// `fresh`, or -1.
struct Distribution {
  std::vector<Tensor> fresh;
  std::vector<int64_t> fresh_of;
  internal::TransferRun run;
};

// Plans the call's transfers and makes their locals. Each leaf and its tensors are read in
// one walk (its key words, its source and destination refs), and each plan tensor in one
// more: at 10,000 leaves a second pass over either misses the cache on every leaf (about
// 0.1 ms a pass). The refs are made checked ones here, where everything that would be
// checked holds by construction (the plan was made from these full tensors and shard
// boxes; a ShardedTensor's shards match their metadata; new locals are shaped by the
// plan, and the call has checked each full tensor against its leaf), unless the tensors sit
// on two different devices, which the executor then refuses.
absl::Status PlanDistribution(const internal::Leaves& full_leaves,
                              const internal::MutableLeaves& local_leaves,
                              const std::vector<int64_t>& target, int rank,
                              const std::optional<Device>& device, Distribution& out) {
  const size_t n = full_leaves.size();
  std::vector<size_t> reaching;  // full leaves with a transfer, in order
  std::vector<Device> fresh_device;  // of each new DTensor local
  internal::RouteKey key(n);  // DistributeRequest's words
  internal::TransferLocals sources, destinations;
  reaching.reserve(n);
  fresh_device.reserve(n);
  sources.tensors.reserve(n);
  sources.begin.reserve(n + 1);
  destinations.tensors.reserve(n);
  destinations.begin.reserve(n + 1);
  out.fresh_of.assign(n, -1);
  const DeviceMesh* mesh = nullptr;  // the last mesh checked
  Device site_device = Device::CPU();
  // Whether the refs hold what the executor would check (the call's validation has checked
  // every full tensor's dtype and shape against its leaf): no two tensors on different
  // devices off the CPU.
  bool trusted = true;
  const auto note_device = [&](Device d) {
    if (d.is_cpu()) return;
    if (d.is_meta() || (!site_device.is_cpu() && d != site_device)) trusted = false;
    site_device = d;
  };
  for (size_t i = 0; i < n; ++i) {
    if (target[i] < 0) continue;
    const Value& v = *full_leaves[i].value;
    const Value& leaf = LeafValue(local_leaves, target[i]);
    if (v.kind() != ValueKind::kTensor || v.as_tensor().dim() == 0 || !leaf.is_any_tensor() ||
        leaf.kind() == ValueKind::kTensor) {
      continue;
    }
    const Tensor& full = v.as_tensor();
    if (leaf.kind() == ValueKind::kDTensor) {
      const DTensor& d = leaf.as_dtensor();
      if (mesh != d.mesh().get()) {
        if (!d.mesh()->Coordinate(rank).has_value()) {
          return absl::InvalidArgumentError(absl::StrCat("'", full_leaves[i].path, "': rank ", rank,
                                                         " is not in ", d.mesh()->ToString()));
        }
        mesh = d.mesh().get();
      }
      const Device to =
          device.value_or(d.local().device().is_meta() ? Device::CPU() : d.local().device());
      out.fresh_of[i] = static_cast<int64_t>(fresh_device.size());
      fresh_device.push_back(to);
      note_device(to);
      destinations.tensors.push_back({});  // the new local's, once it is made
    } else {
      for (const LocalShard& shard : leaf.as_sharded().local_shards()) {
        note_device(shard.tensor.device());
        destinations.tensors.push_back(internal::CheckedRef(shard.tensor));
      }
    }
    destinations.begin.push_back(destinations.tensors.size());
    note_device(full.device());
    sources.tensors.push_back(internal::CheckedRef(full));
    sources.begin.push_back(sources.tensors.size());
    AddTransferToKey(full_leaves[i].path, full, leaf, key);
    reaching.push_back(i);
  }
  const int64_t ranks = std::numeric_limits<int32_t>::max();  // no exchange is made
  SDRT_RETURN_IF_ERROR(out.run.RouteLocal(
      internal::TransferSite(rank, ranks, site_device),
      DistributeRequest(full_leaves, local_leaves, target, reaching, key, rank)));

  // The new locals: this rank's destination piece of each, as planned; the CPU ones views
  // of one arena (one allocation, not one per tensor), in plan order.
  const internal::TransferPlan& plan = out.run.plan();
  struct CpuFresh {
    size_t k;  // plan tensor
    IntVector shape;
  };
  std::vector<CpuFresh> cpu_fresh;
  std::vector<internal::FreshPiece> cpu_pieces;
  cpu_fresh.reserve(fresh_device.size());
  cpu_pieces.reserve(fresh_device.size());
  out.fresh.resize(fresh_device.size());
  for (size_t k = 0; k < reaching.size(); ++k) {
    const int64_t f = out.fresh_of[reaching[k]];
    if (f < 0) continue;
    const internal::TransferTensorPlan& tp = plan.tensors[k];
    const IntVector* shape = nullptr;
    for (const internal::TransferPiece& piece : tp.destination()) {
      if (piece.rank == rank) shape = &piece.local_shape;
    }
    if (shape == nullptr) {
      return absl::InternalError(absl::StrCat("'", tp.name, "': the plan has no piece of rank ",
                                              rank));
    }
    const Device to = fresh_device[static_cast<size_t>(f)];
    if (to.is_cpu()) {
      SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(*shape));
      const DType dtype = tp.destination_dtype();
      SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(dtype, numel));
      cpu_pieces.push_back({bytes, ElementAlignment(dtype)});
      cpu_fresh.push_back({k, *shape});
    } else {
      Tensor& mine = out.fresh[static_cast<size_t>(f)];
      SDRT_ASSIGN_OR_RETURN(mine, Tensor::Empty(*shape, tp.destination_dtype(), to));
      destinations.tensors[destinations.begin[k]] = internal::CheckedRef(mine);
    }
  }
  if (!cpu_pieces.empty()) {
    SDRT_ASSIGN_OR_RETURN(const internal::FreshLayout arena, internal::LayOutFresh(cpu_pieces));
    SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> storage,
                          Storage::AllocateCpu(arena.bytes));
    for (size_t c = 0; c < cpu_fresh.size(); ++c) {
      const size_t k = cpu_fresh[c].k;
      Tensor& mine = out.fresh[static_cast<size_t>(out.fresh_of[reaching[k]])];
      SDRT_ASSIGN_OR_RETURN(mine, Tensor::AtByteOffset(storage, arena.offsets[c],
                                                       plan.tensors[k].destination_dtype(),
                                                       cpu_fresh[c].shape));
      destinations.tensors[destinations.begin[k]] = internal::CheckedRef(mine);
    }
  }
  sources.checked = destinations.checked = trusted;
  return out.run.PrepareLocal(std::move(sources), std::move(destinations));
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
    // Every full tensor is checked against the local leaf it reaches (a tree can hold one
    // dotted path twice, "a.b" and "a" -> "b": both go to that leaf); a 0-dim tensor
    // replaces the local leaf whatever it is (written below).
    std::vector<bool> reached(local_leaves->size(), false);
    for (size_t i = 0; i < full_leaves->size() && error.ok(); ++i) {
      if (target[i] < 0 || (*full_leaves)[i].value->kind() != ValueKind::kTensor) continue;
      const internal::MutableLeaf& leaf = (*local_leaves)[static_cast<size_t>(target[i])];
      reached[static_cast<size_t>(target[i])] = true;
      const Tensor& t = (*full_leaves)[i].value->as_tensor();
      if (t.dim() > 0) error = CheckTensorLeaf(leaf.path, t, *leaf.value);
    }
    for (size_t j = 0; j < local_leaves->size() && error.ok(); ++j) {
      const internal::MutableLeaf& leaf = (*local_leaves)[j];
      const ValueKind kind = leaf.value->kind();
      if ((kind == ValueKind::kDTensor || kind == ValueKind::kShardedTensor) && !reached[j]) {
        error = absl::InvalidArgumentError(absl::StrCat(
            "rank ", rank, " lacks key '", leaf.path, "' in its full state dict (", full.size(),
            " top-level keys), which its local ", ValueKindName(kind),
            " needs; when only one rank holds the full state dict, use BroadcastStateDict"));
      }
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
  const DeviceMesh* mesh = nullptr;  // the last DTensor's mesh and this rank's coordinate
  IntVector coordinate;
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
        if (mesh != d.mesh().get()) {
          mesh = d.mesh().get();
          coordinate = *mesh->Coordinate(rank);
        }
        SDRT_RETURN_IF_ERROR(FillPartialIdentity(mine, *mesh, d.placements(), coordinate));
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
