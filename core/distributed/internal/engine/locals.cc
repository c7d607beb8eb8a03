#include "sdrt/core/distributed/internal/engine/locals.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/prefetch.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Appends to `out` the local tensors of `value` for the pieces of rank `me` among
// `pieces` (one side of plan tensor `tp`; indexed by TransferPiece::local), or returns the
// error naming the leaf; nothing is needed (and `value` may be null) when the rank holds no
// piece. `fresh` is set when a local is allocated here (a meta DTensor local, a plain
// destination leaf); with `keep`, a found local is copied into out.owned and referred to
// there.
absl::Status LocalsOf(const TransferTensorPlan& tp, const Value* value,
                      const std::vector<TransferPiece>& pieces, int64_t me, bool source,
                      Device device, bool keep, TransferLocals& out, bool* fresh) {
  int count = 0;
  for (const TransferPiece& p : pieces) {
    if (p.rank == me) count = std::max(count, p.local + 1);
  }
  const size_t first = out.tensors.size();
  out.tensors.resize(first + static_cast<size_t>(count));
  out.begin.push_back(out.tensors.size());
  if (count == 0) return absl::OkStatus();
  // The text of an error only: this runs per tensor and call.
  const auto where = [&] {
    return absl::StrCat("reshard of '", tp.name, "' (", source ? "source" : "destination", ")");
  };
  const DType dtype = source ? tp.source_dtype() : tp.destination_dtype();
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": this rank has no such leaf"));
  }
  for (const TransferPiece& piece : pieces) {
    if (piece.rank != me) continue;
    const TransferPiece* const p = &piece;
    const Tensor* found = nullptr;
    bool made = false;
    // A local made here for the destination: kept by `out`.
    const auto make = [&]() -> absl::Status {
      SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty(p->local_shape, dtype, device));
      out.owned.push_back(std::move(local));
      found = &out.owned.back();
      made = true;
      if (fresh != nullptr) *fresh = true;
      return absl::OkStatus();
    };
    if (value->kind() == ValueKind::kDTensor) {
      found = &value->as_dtensor().local();
      if (!source && found->is_meta()) SDRT_RETURN_IF_ERROR(make());
    } else if (value->kind() == ValueKind::kShardedTensor) {
      // The piece's box: the rank's p->local-th box in metadata order.
      int seen = 0;
      const ShardedTensor& st = value->as_sharded();
      const ShardMetadata* box = nullptr;
      for (const ShardMetadata& m : st.shards_metadata()) {
        if (m.placement.rank == p->rank && seen++ == p->local) box = &m;
      }
      for (const LocalShard& shard : st.local_shards()) {
        if (box != nullptr && shard.metadata.offsets == box->offsets &&
            shard.metadata.sizes == box->sizes) {
          found = &shard.tensor;
        }
      }
    } else if (value->kind() == ValueKind::kTensor && source) {
      found = &value->as_tensor();
    } else if (!source) {  // a plain leaf (or a scalar) replaced by the full tensor
      SDRT_RETURN_IF_ERROR(make());
    }
    static const Tensor kNone;
    const Tensor& local = found != nullptr ? *found : kNone;
    if (!local.defined() || local.dtype() != dtype || local.shape() != p->local_shape ||
        local.device() != device) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), ": rank ", p->rank, " needs local ", p->local, " as ", DTypeName(dtype),
          ShapeToString(p->local_shape), " on ", device.ToString(), "; it holds ",
          local.defined() ? local.ToString() : "none"));
    }
    const Tensor* kept = &local;
    if (keep && !made) {
      out.owned.push_back(local);
      kept = &out.owned.back();
    }
    out.tensors[first + static_cast<size_t>(p->local)] = CheckedRef(*kept);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FindTransferLocals(const TransferPlan& plan, int64_t me, Device device,
                               const Map& source, Map& destination, bool keep,
                               FoundTransferLocals& out) {
  SDRT_ASSIGN_OR_RETURN(const Leaves src_leaves, CollectLeaves(source));
  SDRT_ASSIGN_OR_RETURN(out.destination_leaves, CollectMutableLeaves(destination));
  const MutableLeaves& dst_leaves = out.destination_leaves;
  // Each plan tensor's leaf on either side: one comparison per tensor when the trees hold
  // the plan's paths in its order.
  struct PathOf {
    absl::string_view operator()(const TransferTensorPlan& tp) const { return tp.name; }
    absl::string_view operator()(const Leaf& leaf) const { return leaf.path; }
    absl::string_view operator()(const MutableLeaf& leaf) const { return leaf.path; }
  };
  const std::vector<int64_t> src_of = MatchPaths(plan.tensors, src_leaves, PathOf());
  out.destination_of = MatchPaths(plan.tensors, dst_leaves, PathOf());
  const std::vector<int64_t>& dst_of = out.destination_of;
  const size_t n = plan.tensors.size();
  for (TransferLocals* side : {&out.sources, &out.destinations}) {
    side->tensors.reserve(n);
    side->begin.reserve(n + 1);
  }
  // The caller's Values and DTensors, asked for ahead of use (prefetch.h): at 10,000
  // tensors their first reads were half of the call's time. Each tensor has a leaf on
  // either side, so the walk asks for 2n of them: tensor j / 2's source or destination.
  const auto mapped = [&](size_t t, bool source) -> const Value* {
    const std::map<std::string, Value>& leaves = out.mapped.destinations;
    if (source || leaves.empty()) return nullptr;
    const auto it = leaves.find(plan.tensors[t].name);
    return it == leaves.end() ? nullptr : &it->second;
  };
  const auto value_of = [&](size_t j) -> const Value* {
    const size_t t = j / 2;
    if (const Value* m = mapped(t, j % 2 == 0)) return m;  // before a leaf of the same path
    const int64_t i = j % 2 == 0 ? src_of[t] : dst_of[t];
    if (i < 0) return nullptr;
    return j % 2 == 0 ? src_leaves[i].value : dst_leaves[i].value;
  };
  absl::Status status;
  ForEachPrefetched(2 * n, value_of, [&](size_t j) {
    if (j % 2 == 1) return true;  // both leaves of tensor j / 2 are done at its source's turn
    const size_t t = j / 2;
    const TransferTensorPlan& tp = plan.tensors[t];
    status = LocalsOf(tp, value_of(j), tp.source(), me, /*source=*/true, device, keep,
                      out.sources, nullptr);
    if (!status.ok()) return false;
    bool is_fresh = false;
    status = LocalsOf(tp, value_of(j + 1), tp.destination(), me, /*source=*/false, device, keep,
                      out.destinations, &is_fresh);
    if (is_fresh) out.fresh.push_back(t);
    return status.ok();
  });
  SDRT_RETURN_IF_ERROR(status);
  // LocalsOf checked every local against its piece and made its ref.
  out.sources.checked = out.destinations.checked = true;
  return absl::OkStatus();
}

absl::Status InstallFreshLocals(FoundTransferLocals& found) {
  for (auto& [path, value] : found.mapped.fresh) {
    for (MutableLeaf& leaf : found.destination_leaves) {
      if (leaf.path == path) *leaf.value = value;
    }
  }
  found.mapped.fresh.clear();
  for (size_t t : found.fresh) {
    Value& leaf = *found.destination_leaves[found.destination_of[t]].value;
    const Tensor& local = *found.destinations.of(t)[0].tensor;
    if (leaf.kind() == ValueKind::kDTensor) {
      SDRT_ASSIGN_OR_RETURN(DTensor filled, leaf.as_dtensor().WithLocal(local));
      leaf = Value(std::move(filled));
    } else {
      leaf = Value(local);
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
