#include "sdrt/core/distributed/internal/local_target.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

uint64_t HashLayout(const DTensor& dtensor) {
  // FNV-1a over the mesh's address, the global shape and the placements.
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  mix(reinterpret_cast<uintptr_t>(dtensor.mesh().get()));
  for (int64_t d : dtensor.global_shape()) mix(static_cast<uint64_t>(d));
  for (const Placement& p : dtensor.placements()) {
    mix(static_cast<uint64_t>(p.kind()) << 48 ^ static_cast<uint64_t>(p.dim()) << 32 ^
        static_cast<uint64_t>(p.split_factor()) << 8 ^ static_cast<uint64_t>(p.reduce_op()));
  }
  return h;
}
namespace {

bool AnyPartial(const std::vector<Placement>& placements) {
  return std::any_of(placements.begin(), placements.end(),
                     [](const Placement& p) { return p.is_partial(); });
}

std::string Describe(DType dtype, IntSpan shape) {
  return absl::StrCat(DTypeName(dtype), ShapeToString(shape));
}

}  // namespace

struct LocalLayoutCache::Entry {
  int rank = 0;
  const DeviceMesh* mesh = nullptr;
  DType dtype = DType::kFloat32;
  IntVector global_shape;
  std::vector<Placement> placements;
  Layout layout;
};

LocalLayoutCache::LocalLayoutCache() = default;
LocalLayoutCache::~LocalLayoutCache() = default;

absl::StatusOr<const LocalLayoutCache::Layout*> LocalLayoutCache::Get(absl::string_view name,
                                                                      const DTensor& d, int rank) {
  std::vector<std::unique_ptr<Entry>>& same_key =
      entries_[((HashLayout(d) ^ static_cast<uint64_t>(d.dtype())) * 0x100000001b3ULL ^
                static_cast<uint64_t>(rank)) *
               0x100000001b3ULL];
  for (const std::unique_ptr<Entry>& e : same_key) {
    if (e->rank == rank && e->mesh == d.mesh().get() && e->dtype == d.dtype() &&
        e->global_shape == d.global_shape() && e->placements == d.placements()) {
      return &e->layout;
    }
  }
  SDRT_RETURN_IF_ERROR(
      CheckShardingCutsWholeBytes(name, d.dtype(), d.global_shape(), *d.mesh(), d.placements()));
  SDRT_ASSIGN_OR_RETURN(
      LocalShardInfo info,
      ComputeLocalShapeAndGlobalOffset(d.global_shape(), *d.mesh(), d.placements(), rank));
  auto e = std::make_unique<Entry>();
  e->rank = rank;
  e->mesh = d.mesh().get();
  e->dtype = d.dtype();
  e->global_shape = d.global_shape();
  e->placements = d.placements();
  e->layout.runs = OwnedRuns(info);
  e->layout.info = std::move(info);
  e->layout.partial = AnyPartial(d.placements());
  same_key.push_back(std::move(e));
  return &same_key.back()->layout;
}

absl::Status PlanLocalTarget(absl::string_view name, DType dtype, IntSpan shape, MutableLeaf& leaf,
                             const LocalTargetRules& rules, LocalTarget& target) {
  target.leaf = &leaf;
  const Value& v = *leaf.value;
  // Built only for an error message.
  const auto where = [name] { return absl::StrCat("'", name, "'"); };
  const auto fresh = [&rules](IntSpan fresh_shape, DType fresh_dtype) {
    return rules.allocate ? Tensor::Empty(fresh_shape, fresh_dtype, rules.device)
                          : Tensor::Meta(fresh_shape, fresh_dtype);
  };
  const auto same = [&](DType other_dtype, IntSpan other_shape) {
    const bool cast = rules.allow_cast && CastKindOf(other_dtype) == CastKind::kFloat &&
                      CastKindOf(dtype) == CastKind::kFloat;
    return (other_dtype == dtype || cast) &&
           std::equal(other_shape.begin(), other_shape.end(), shape.begin(), shape.end());
  };
  // A 0-dim checkpoint tensor replaces the local leaf, whatever it is (as PyTorch's
  // _broadcast_state_dict does).
  if (v.kind() == ValueKind::kDTensor && !shape.empty()) {
    const DTensor& d = v.as_dtensor();
    if (!same(d.dtype(), d.global_shape())) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": the local DTensor is ", Describe(d.dtype(), d.global_shape()),
                       " but the checkpoint holds ", Describe(dtype, shape)));
    }
    const bool outside = rules.mesh_ranks.has_value() && d.mesh() != nullptr &&
                         (d.mesh()->max_rank() >= *rules.mesh_ranks ||
                          (rules.spans && d.mesh()->num_ranks() != *rules.mesh_ranks));
    if (outside && rules.spans) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": ", d.ToString(),
                                                     " is not on a mesh of the communicator's ",
                                                     *rules.mesh_ranks, " ranks"));
    }
    if (outside) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": ", d.ToString(), " is on a mesh with rank ", d.mesh()->max_rank(),
          ", beyond the communicator's ", *rules.mesh_ranks, " ranks"));
    }
    if (d.mesh() == nullptr || !d.mesh()->Coordinate(rules.rank).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": ", d.ToString(), " is not on a mesh holding rank ", rules.rank,
                       d.mesh() == nullptr ? "" : ": " + d.mesh()->ToString()));
    }
    // The layout's checks, local shape and runs: from the call's cache when there is one.
    LocalLayoutCache::Layout own;
    const LocalLayoutCache::Layout* layout = &own;
    if (rules.layouts != nullptr) {
      SDRT_ASSIGN_OR_RETURN(layout, rules.layouts->Get(name, d, rules.rank));
      target.runs.push_back(&layout->runs);
    } else {
      SDRT_RETURN_IF_ERROR(
          CheckShardingCutsWholeBytes(name, dtype, shape, *d.mesh(), d.placements()));
      SDRT_ASSIGN_OR_RETURN(own.info, ComputeLocalShapeAndGlobalOffset(d.global_shape(), *d.mesh(),
                                                                       d.placements(), rules.rank));
      target.owned_runs.push_back(OwnedRuns(own.info));
      target.runs.push_back(&target.owned_runs.back());
      own.partial = AnyPartial(d.placements());
    }
    target.partial = layout->partial;
    const LocalShardInfo& info = layout->info;
    Tensor dest;
    if (d.local().device().is_meta()) {
      target.kind = LocalTarget::Kind::kFreshDTensor;
      SDRT_ASSIGN_OR_RETURN(dest, fresh(info.local_shape, d.dtype()));
    } else {
      target.kind = LocalTarget::Kind::kInPlaceDTensor;
      if (d.local().shape() != info.local_shape) {  // ValidateLocalShape names the mismatch
        SDRT_RETURN_IF_ERROR(ValidateLocalShape(d.local().shape(), d.global_shape(), *d.mesh(),
                                                d.placements(), rules.rank, std::string(name)));
      }
      dest = d.local();
    }
    target.dests.push_back(std::move(dest));
    return absl::OkStatus();
  }
  if (v.kind() == ValueKind::kShardedTensor && !shape.empty()) {
    const ShardedTensor& st = v.as_sharded();
    if (!same(st.dtype(), st.global_shape())) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": the local ShardedTensor is ", Describe(st.dtype(), st.global_shape()),
          " but the checkpoint holds ", Describe(dtype, shape)));
    }
    target.kind = LocalTarget::Kind::kSharded;
    target.owned_runs.reserve(st.local_shards().size());  // runs point into it
    for (const LocalShard& s : st.local_shards()) {
      if (s.tensor.device().is_meta()) {
        return absl::FailedPreconditionError(
            absl::StrCat(where(), ": a local shard is on meta (nowhere to write)"));
      }
      for (size_t dim = 0; dim < shape.size(); ++dim) {
        if (s.metadata.offsets[dim] < 0 || s.metadata.sizes[dim] < 0 ||
            (s.metadata.sizes[dim] > 0 &&
             s.metadata.offsets[dim] > shape[dim] - s.metadata.sizes[dim])) {
          return absl::InvalidArgumentError(absl::StrCat(where(), ": local shard ",
                                                         s.metadata.ToString(), " does not fit in ",
                                                         ShapeToString(shape)));
        }
      }
      SDRT_RETURN_IF_ERROR(
          CheckBoxCutsWholeBytes(name, dtype, shape, s.metadata.offsets, s.metadata.sizes));
      target.dests.push_back(s.tensor);
      target.owned_runs.push_back(BoxRuns(s.metadata.offsets, s.metadata.sizes));
      target.runs.push_back(&target.owned_runs.back());
    }
    return absl::OkStatus();
  }
  target.kind = LocalTarget::Kind::kReplace;
  SDRT_ASSIGN_OR_RETURN(Tensor dest, fresh(shape, dtype));
  target.dests.push_back(std::move(dest));
  target.owned_runs.push_back(BoxRuns(IntVector(shape.size(), 0), shape));
  target.runs.push_back(&target.owned_runs.back());
  return absl::OkStatus();
}

FreshDTensors::FreshDTensors(size_t count) : count_(count) {}

Value FreshDTensors::Make(DTensor d) {
  if (count_ == 0) return Value(std::move(d));
  if (block_ == nullptr || block_->size() == count_) {
    auto block = std::make_shared<std::vector<DTensor>>();
    block->reserve(count_);  // never reallocated: the Values point into it
    block_ = std::move(block);
  }
  block_->push_back(std::move(d));
  return Value(std::shared_ptr<const DTensor>(block_, &block_->back()));
}

absl::Status CommitLocalTarget(LocalTarget& target, int rank, FreshDTensors& made) {
  Value& leaf = *target.leaf->value;
  switch (target.kind) {
    case LocalTarget::Kind::kReplace:
      leaf = Value(target.dests[0]);
      break;
    case LocalTarget::Kind::kFreshDTensor:
    case LocalTarget::Kind::kInPlaceDTensor: {
      const DTensor& d = leaf.as_dtensor();
      if (target.partial) {
        SDRT_RETURN_IF_ERROR(FillPartialIdentity(target.dests[0], *d.mesh(), d.placements(),
                                                 *d.mesh()->Coordinate(rank)));
      }
      if (target.kind == LocalTarget::Kind::kFreshDTensor) {
        SDRT_ASSIGN_OR_RETURN(DTensor fresh, d.WithLocal(std::move(target.dests[0])));
        leaf = made.Make(std::move(fresh));
      }
      break;
    }
    case LocalTarget::Kind::kSharded:
      break;
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
