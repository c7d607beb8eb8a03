// LowerLocals (lowering.h): a rank's lowered destination leaves over views of its locals.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// How many locals `value` has on rank `me` (TransferPiece::local numbering).
int LocalCount(const Value& value, int64_t me) {
  switch (value.kind()) {
    case ValueKind::kDTensor:
      return value.as_dtensor().mesh()->Coordinate(me).has_value() ? 1 : 0;
    case ValueKind::kShardedTensor: {
      int count = 0;
      for (const ShardMetadata& m : value.as_sharded().shards_metadata()) {
        count += m.placement.rank == me ? 1 : 0;
      }
      return count;
    }
    case ValueKind::kTensor:
      return 1;
    default:
      return 0;
  }
}

// Rank `me`'s locals of destination leaf `path` (`value`), in TransferPiece::local order; a
// meta DTensor local or plain meta leaf is replaced by a new one (recorded in out.fresh).
absl::StatusOr<std::vector<Tensor>> DestinationLocals(const std::string& path, const Value* value,
                                                      int64_t me, Device device,
                                                      MappedLeaves& out) {
  const std::string where = absl::StrCat("weight map: the destination '", path, "' on rank ", me);
  if (value == nullptr) return Invalid(where, "this rank has no such leaf");
  std::vector<Tensor> locals(static_cast<size_t>(LocalCount(*value, me)));
  switch (value->kind()) {
    case ValueKind::kDTensor: {
      const DTensor& d = value->as_dtensor();
      if (locals.empty()) break;
      locals[0] = d.local();
      if (locals[0].is_meta()) {
        absl::StatusOr<Tensor> made = Tensor::Empty(d.local().shape(), d.dtype(), device);
        if (!made.ok()) {
          return absl::Status(made.status().code(),
                              absl::StrCat(where, ": ", made.status().message()));
        }
        locals[0] = *std::move(made);
        SDRT_ASSIGN_OR_RETURN(DTensor filled, d.WithLocal(locals[0]));
        out.fresh.emplace_back(path, Value(std::move(filled)));
      }
      break;
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& st = value->as_sharded();
      size_t seen = 0;
      for (const ShardMetadata& m : st.shards_metadata()) {
        if (m.placement.rank != me) continue;
        for (const LocalShard& shard : st.local_shards()) {
          if (shard.metadata.offsets == m.offsets && shard.metadata.sizes == m.sizes) {
            locals[seen] = shard.tensor;
          }
        }
        ++seen;
      }
      break;
    }
    case ValueKind::kTensor:
      locals[0] = value->as_tensor();
      if (locals[0].is_meta()) {  // a plain meta leaf becomes a new full tensor
        absl::StatusOr<Tensor> made = Tensor::Empty(locals[0].shape(), locals[0].dtype(), device);
        if (!made.ok()) {
          return absl::Status(made.status().code(),
                              absl::StrCat(where, ": ", made.status().message()));
        }
        locals[0] = *std::move(made);
        out.fresh.emplace_back(path, Value(locals[0]));
      }
      break;
    default:
      break;
  }
  for (const Tensor& t : locals) {
    if (!t.defined() || t.is_meta()) {
      return Invalid(where, absl::StrCat("a local to write into is needed; it holds ",
                                         t.defined() ? t.ToString() : "none"));
    }
  }
  return locals;
}

// The step of FP8 leaf `q` on rank `me`: per local of its codes the scale local beside it
// and, unless `staging_dtype` is unset (the senders quantize), a staging local of that
// dtype. InvalidArgument naming the leaf for locals that are not contiguous, scales of
// another count or shape than the codes' blocks; Tensor::Empty's errors. The staging is on
// the codes' device, the scales of any.
absl::StatusOr<QuantizeStep> MakeQuantizeStep(const QuantizedDestination& q,
                                              std::optional<DType> staging_dtype,
                                              const std::vector<Tensor>& codes,
                                              const std::vector<Tensor>& scales, int64_t me) {
  const std::string where = absl::StrCat("FP8: '", q.path, "' on rank ", me);
  QuantizeStep step;
  step.spec = q;
  if (codes.size() != scales.size()) {
    return Invalid(where, absl::StrCat(codes.size(), " locals of codes and ", scales.size(),
                                       " of '", q.scale_path, "'"));
  }
  for (size_t j = 0; j < codes.size(); ++j) {
    const Tensor& c = codes[j];
    const Tensor& s = scales[j];
    IntVector want{1};
    if (q.tile > 0) {
      want = {(c.size(0) + q.tile - 1) / q.tile, (c.size(1) + q.tile - 1) / q.tile};
    }
    const bool fits = q.tile > 0 ? s.shape() == want : s.numel() == 1;
    if (!c.is_contiguous() || !s.is_contiguous() || !fits) {
      return Invalid(where, absl::StrCat(
          "its local ", c.ToString(), " and scales ", s.ToString(), " must be contiguous, the "
          "scales ", q.tile > 0 ? ShapeToString(want) : "one element",
          q.tile > 0 ? absl::StrCat(" (a scale per ", q.tile, " x ", q.tile, " block)") : ""));
    }
    QuantizeLocal& local = step.locals.emplace_back();
    if (staging_dtype.has_value()) {
      SDRT_ASSIGN_OR_RETURN(local.staging, Tensor::Empty(c.shape(), *staging_dtype, c.device()));
    }
    local.codes = c;
    local.scales = s;
  }
  return step;
}

}  // namespace

absl::Status LowerLocals(const MapLowering& lowering, int64_t me, Device device, Map& destination,
                         MappedLeaves& out) {
  if (lowering.empty()) return absl::OkStatus();
  SDRT_ASSIGN_OR_RETURN(MutableLeaves leaves, CollectMutableLeaves(destination));
  absl::flat_hash_map<absl::string_view, const Value*> by_path;
  for (const MutableLeaf& l : leaves) by_path.emplace(l.path, l.value);
  const auto find = [&](absl::string_view path) -> const Value* {
    const auto it = by_path.find(path);
    return it == by_path.end() ? nullptr : it->second;
  };
  for (const RenamedDestination& r : lowering.renamed) {
    const Value* v = find(r.path);
    if (v == nullptr) continue;  // FindTransferLocals says so if this rank needs it
    if (v->kind() == ValueKind::kDTensor) {
      const size_t fresh = out.fresh.size();
      SDRT_RETURN_IF_ERROR(DestinationLocals(r.path, v, me, device, out).status());
      out.destinations.emplace(r.name, out.fresh.size() > fresh ? out.fresh.back().second : *v);
    } else if (v->kind() == ValueKind::kShardedTensor) {
      out.destinations.emplace(r.name, *v);
    } else {
      // A plain leaf takes the full tensor: written in place when it is one of the
      // source's shape and dtype, else a new one. One box, the whole tensor, on this rank.
      Tensor full;
      if (v->kind() == ValueKind::kTensor && v->as_tensor().defined() &&
          !v->as_tensor().is_meta() && v->as_tensor().shape() == r.shape &&
          v->as_tensor().dtype() == r.dtype && v->as_tensor().device() == device) {
        full = v->as_tensor();
      } else {
        SDRT_ASSIGN_OR_RETURN(full, Tensor::Empty(r.shape, r.dtype, device));
        out.fresh.emplace_back(r.path, Value(full));
      }
      const ShardMetadata m{IntVector(r.shape.size(), 0), r.shape, RemoteDevice{me, device}};
      SDRT_ASSIGN_OR_RETURN(ShardedTensor st, ShardedTensor::Make(r.shape, r.dtype, {m}, {{full, m}}));
      out.destinations.emplace(r.name, Value(std::move(st)));
    }
  }
  std::map<std::string, std::vector<Tensor>> locals_of;  // destination path -> its locals
  const auto locals = [&](const std::string& path) -> absl::StatusOr<std::vector<Tensor>*> {
    auto it = locals_of.find(path);
    if (it == locals_of.end()) {
      SDRT_ASSIGN_OR_RETURN(std::vector<Tensor> made,
                            DestinationLocals(path, find(path), me, device, out));
      it = locals_of.emplace(path, std::move(made)).first;
    }
    return &it->second;
  };
  // FP8 leaves (quantize.h): their sources and the grid of their scales, alike on every rank.
  QuantizeWork& work = out.quantize;
  work.specs = lowering.quantized;
  work.on_senders = lowering.on_senders;
  std::vector<int> source_of(lowering.destinations.size(), -1);  // lowered leaf -> source
  {
    std::map<int, int64_t> tensor_entry;  // a per-tensor destination's entry
    int64_t entries = 0;
    for (size_t i = 0; i < lowering.destinations.size(); ++i) {
      const LoweredDestination& d = lowering.destinations[i];
      if (d.quantized < 0) continue;
      const QuantizedDestination& q = work.specs[static_cast<size_t>(d.quantized)];
      work.per_tensor |= q.tile == 0;
      QuantizedSource src;
      src.name = d.name;
      src.destination = d.quantized;
      if (q.tile == 0) {
        const auto [it, made] = tensor_entry.emplace(d.quantized, entries);
        entries += made ? 1 : 0;
        src.offset = it->second;
      } else {
        // A grid of blocks where the senders quantize; each rank makes its own blocks' scales
        // from its staging otherwise.
        src.grid_rows = work.on_senders ? (d.shape[0] + q.tile - 1) / q.tile : 0;
        src.grid_cols = work.on_senders ? (d.shape[1] + q.tile - 1) / q.tile : 0;
        src.offset = entries;
        entries += src.grid_rows * src.grid_cols;
      }
      source_of[i] = static_cast<int>(work.sources.size());
      work.sources.push_back(std::move(src));
    }
    work.amax.assign(static_cast<size_t>(entries), 0);
    work.scales.assign(static_cast<size_t>(entries), 1.0f);
  }
  // Dequantized leaves (dequantize.h): their sources, and per local a staging of codes.
  out.dequantize.sources = lowering.dequantized;
  out.dequantize.scales.assign(lowering.dequantized.size(), Tensor());
  std::map<std::pair<std::string, int>, size_t> dequantize_of;  // (path, local) -> local
  const auto DequantizeLocalOf = [&](const std::string& path, int j, const Tensor& values,
                                     DType codes, int64_t rank) -> absl::StatusOr<DequantizeLocal*> {
    auto it = dequantize_of.find({path, j});
    if (it == dequantize_of.end()) {
      if (!values.is_contiguous()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "FP8: '", path, "' on rank ", rank, " is dequantized into contiguous tensors; it is ",
            values.ToString()));
      }
      DequantizeLocal local;
      SDRT_ASSIGN_OR_RETURN(local.staging, Tensor::Empty(values.shape(), codes, values.device()));
      local.values = values;
      it = dequantize_of.emplace(std::make_pair(path, j), out.dequantize.locals.size()).first;
      out.dequantize.locals.push_back(std::move(local));
    }
    return &out.dequantize.locals[it->second];
  };
  std::map<std::string, size_t> step_of;  // an FP8 leaf's path -> its step
  std::map<std::string, size_t> spec_of;  // an FP8 leaf's path -> its spec
  for (size_t i = 0; i < work.specs.size(); ++i) spec_of.emplace(work.specs[i].path, i);
  // The step of FP8 leaf `path` (one of d's leaves: a split's parts are several).
  const auto step = [&](const LoweredDestination& d, const std::string& path,
                        int source) -> absl::StatusOr<QuantizeStep*> {
    const auto spec = spec_of.find(path);
    if (spec == spec_of.end()) {
      return absl::InternalError(absl::StrCat("FP8: no recipe for '", path, "'"));
    }
    const QuantizedDestination& q = work.specs[spec->second];
    auto it = step_of.find(q.path);
    if (it == step_of.end()) {
      SDRT_ASSIGN_OR_RETURN(std::vector<Tensor>* codes, locals(q.path));
      SDRT_ASSIGN_OR_RETURN(std::vector<Tensor> scales,
                            DestinationLocals(q.scale_path, find(q.scale_path), me, device, out));
      SDRT_ASSIGN_OR_RETURN(
          QuantizeStep made,
          MakeQuantizeStep(q, work.on_senders ? std::nullopt : std::optional<DType>(d.dtype),
                           *codes, scales, me));
      made.grid_offset = work.sources[static_cast<size_t>(source)].offset;
      it = step_of.emplace(q.path, work.steps.size()).first;
      work.steps.push_back(std::move(made));
    }
    return &work.steps[it->second];
  };
  for (size_t index = 0; index < lowering.destinations.size(); ++index) {
    const LoweredDestination& d = lowering.destinations[index];
    std::vector<ShardMetadata> metadata;
    std::vector<LocalShard> shards;
    metadata.reserve(d.boxes.size());
    for (size_t i = 0; i < d.boxes.size(); ++i) {
      const TransferBox& box = d.boxes[i];
      ShardMetadata m{box.offsets, box.sizes, RemoteDevice{box.rank, device}};
      const LoweredView& v = d.views[i];
      if (v.rank == me && d.scale_of >= 0) {
        // A dequantized source's scales, whole on this rank: a new local (dequantize.h).
        Tensor& scales = out.dequantize.scales[static_cast<size_t>(d.scale_of)];
        SDRT_ASSIGN_OR_RETURN(scales, Tensor::Empty(d.shape, d.dtype, device));
        shards.push_back({scales, m});
      } else if (v.rank == me) {
        const std::string& path = d.leaves[static_cast<size_t>(v.leaf)];
        SDRT_ASSIGN_OR_RETURN(std::vector<Tensor>* mine, locals(path));
        const bool has = v.local < static_cast<int>(mine->size());
        Tensor into = has ? (*mine)[static_cast<size_t>(v.local)] : Tensor();
        if (has && d.quantized >= 0) {
          // An FP8 leaf: the view is of its codes (the senders quantize) or of its staging
          // local (FinishQuantized quantizes it here).
          SDRT_ASSIGN_OR_RETURN(QuantizeStep* const q, step(d, path, source_of[index]));
          QuantizeLocal& local = q->locals[static_cast<size_t>(v.local)];
          local.views.push_back({v.start, v.length, source_of[index], box.offsets});
          if (!work.on_senders) into = local.staging;
        } else if (has && d.dequantized >= 0) {
          // A dequantized leaf: the view is of its staging codes (FinishDequantized).
          SDRT_ASSIGN_OR_RETURN(DequantizeLocal* const local,
                                DequantizeLocalOf(path, v.local, into, d.dtype, me));
          local->views.push_back({v.start, v.length, d.dequantized, box.offsets});
          into = local->staging;
        }
        absl::StatusOr<Tensor> view =
            has ? into.Narrow(d.dim, v.start, v.length)
                : absl::InvalidArgumentError(absl::StrCat("no local ", v.local));
        if (!view.ok()) {
          return Invalid(absl::StrCat("weight map: the destination '", path, "' on rank ", me),
                         view.status().message());
        }
        shards.push_back({*std::move(view), m});
      }
      metadata.push_back(std::move(m));
    }
    absl::StatusOr<ShardedTensor> st =
        ShardedTensor::Make(d.shape, d.dtype, std::move(metadata), std::move(shards));
    if (!st.ok()) {
      return Invalid(absl::StrCat("weight map: '", d.name, "' into '",
                                  d.leaves.empty() ? d.name : d.leaves[0], "' on rank ", me),
                     st.status().message());
    }
    out.destinations.emplace(d.name, Value(*std::move(st)));
    if (!d.zero_rest || find(d.leaves[0]) == nullptr) continue;
    // A pad: the elements of each local that no view covers are zeroed.
    SDRT_ASSIGN_OR_RETURN(std::vector<Tensor>* mine, locals(d.leaves[0]));
    for (size_t j = 0; j < mine->size(); ++j) {
      std::vector<std::pair<int64_t, int64_t>> covered;
      for (const LoweredView& v : d.views) {
        if (v.rank == me && v.local == static_cast<int>(j)) {
          covered.emplace_back(v.start, v.start + v.length);
        }
      }
      Tensor& local = (*mine)[j];
      const int64_t size = local.size(d.dim);
      std::sort(covered.begin(), covered.end());
      covered.emplace_back(size, size);
      int64_t at = 0;
      for (const auto& [a, b] : covered) {
        if (a > at) {
          SDRT_ASSIGN_OR_RETURN(Tensor gap, local.Narrow(d.dim, at, a - at));
          if (gap.device().is_cpu() && gap.is_contiguous()) {
            // In place: a padded vocabulary's rows need no second buffer of their size.
            if (gap.nbytes() > 0) std::memset(gap.data_ptr(), 0, static_cast<size_t>(gap.nbytes()));
          } else {
            absl::StatusOr<Tensor> zeros = Tensor::Zeros(gap.shape(), gap.dtype(), device);
            if (!zeros.ok()) {
              return absl::Status(zeros.status().code(),
                                  absl::StrCat("weight map: the pad of '", d.leaves[0], "' on rank ",
                                               me, ": ", zeros.status().message()));
            }
            SDRT_RETURN_IF_ERROR(gap.CopyFrom(*zeros));
          }
        }
        at = std::max(at, b);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
