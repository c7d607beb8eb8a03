#include "sdrt/core/distributed/internal/mapping/quantize.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/fp8_boxes.h"
#include "sdrt/core/state_dict/internal/tree_walker.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}


// The elements of one row along dim 0.
int64_t RowElements(const Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 ? 1 : t.numel() / t.size(0);
}

// The rows of view `v` of a local whose rows are `cols` elements, in a grid of its own
// (`tile` 0: one tile): a receiver quantizes a view whose blocks start with it.
Fp8Rows ViewRows(const QuantizeView& v, int64_t cols, int64_t tile) {
  Fp8Rows box;
  box.first = v.start;
  box.rows = v.length;
  box.cols = cols;
  box.tile = tile;
  if (tile > 0) {
    box.grid_cols = (cols + tile - 1) / tile;
    box.grid_entries = std::max<int64_t>((v.length + tile - 1) / tile, 1) * box.grid_cols;
  }
  return box;
}

}  // namespace

bool HasCodeLeaves(const std::vector<std::vector<LeafLayout>>& per_rank) {
  for (const std::vector<LeafLayout>& leaves : per_rank) {
    for (const LeafLayout& l : leaves) {
      if (IsFp8Codes(l.dtype)) return true;
    }
  }
  return false;
}

bool HasCodeLeaves(const Map& tree) {
  // Walked without the leaves' paths (a load asks this of every tree, before its own walk).
  bool codes = false;
  const auto visit = [&codes](const Value& v, const Map*) {
    codes = codes || (v.kind() == ValueKind::kTensor && IsFp8Codes(v.as_tensor().dtype())) ||
            (v.kind() == ValueKind::kDTensor && IsFp8Codes(v.as_dtensor().dtype())) ||
            (v.kind() == ValueKind::kShardedTensor && IsFp8Codes(v.as_sharded().dtype()));
    return absl::OkStatus();
  };
  // A tree nested too deep: the load reports it.
  return TreeWalker<const Value>().EachLeaf(tree, LeafKinds::kValues, visit).ok() && codes;
}

absl::StatusOr<Fp8Scales> FindFp8Scales(
    const std::string& path, const std::function<const LeafLayout*(const std::string&)>& find) {
  Fp8Scales out;
  for (const char* suffix : {"_scale_inv", "_scale"}) {
    out.layout = find(path + suffix);
    if (out.layout == nullptr) continue;
    out.name = path + suffix;
    out.tile = std::string(suffix) == "_scale_inv" ? kFp8BlockSize : 0;
    if (out.layout->dtype != DType::kFloat32 && out.layout->dtype != DType::kFloat8E8M0FNU) {
      return Invalid(absl::StrCat("FP8: '", path, "' with '", out.name, "'"),
                     absl::StrCat("scales are float32 or float8_e8m0fnu, not ",
                                  DTypeName(out.layout->dtype)));
    }
    break;
  }
  return out;
}

absl::StatusOr<std::vector<QuantizedDestination>> FindQuantizedDestinations(
    const std::vector<const LeafLayout*>& destinations,
    const std::function<const LeafLayout*(const std::string&)>& find) {
  std::vector<QuantizedDestination> out;
  for (const LeafLayout* l : destinations) {
    if (!IsFp8Codes(l->dtype)) continue;
    QuantizedDestination q;
    q.path = l->path;
    q.codes = l->dtype;
    SDRT_ASSIGN_OR_RETURN(const Fp8Scales scales, FindFp8Scales(l->path, find));
    if (scales.layout == nullptr) continue;  // no scales: a plain cast (scale 1)
    const LeafLayout* scale = scales.layout;
    q.scale_path = scales.name;
    q.tile = scales.tile;
    const std::string where = absl::StrCat("FP8: '", q.path, "' with '", q.scale_path, "'");
    if (q.tile > 0 && l->shape.size() != 2) {
      return Invalid(where, absl::StrCat("block scales are for 2-D weights; it is ",
                                         ShapeToString(l->shape)));
    }
    q.scale = scale->dtype;
    out.push_back(std::move(q));
  }
  return out;
}

absl::Status CheckQuantizedBoxes(const QuantizedDestination& q, const std::string& source,
                                 DType source_dtype, int dim, const std::vector<TransferBox>& boxes,
                                 const std::vector<int64_t>& view_starts,
                                 const std::string& where) {
  if (!IsFp8Wide(source_dtype)) {
    return Invalid(where, absl::StrCat("'", q.path, "' quantizes float32, bfloat16 or float16, not ",
                                       DTypeName(source_dtype),
                                       " (fusing FP8 sources with their scales is not built)"));
  }
  if (dim != 0) {
    return Invalid(where, absl::StrCat("'", q.path, "' is quantized, so it is fused along dim 0"));
  }
  if (q.tile == 0) return absl::OkStatus();
  for (size_t i = 0; i < boxes.size(); ++i) {
    const TransferBox& b = boxes[i];
    const bool empty = std::any_of(b.sizes.begin(), b.sizes.end(), [](int64_t s) { return s <= 0; });
    if (empty) continue;
    const bool aligned = b.offsets.size() == 2 && b.offsets[0] % q.tile == 0 &&
                         b.offsets[1] % q.tile == 0 && view_starts[i] % q.tile == 0;
    if (!aligned) {
      return Invalid(where, absl::StrCat(
          "the block ", q.tile, " x ", q.tile, " does not fit: rank ", b.rank, " holds '", source,
          "' from ", ShapeToString(b.offsets), " at row ", view_starts[i], " of its local of '",
          q.path, "', and block scales need each piece to start at a multiple of ", q.tile,
          " in both (as vLLM asks of each rank's part)"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Every grid entry's scale from its amax (the all-reduced bits), by its destination's recipe.
void ScalesFromAmax(QuantizeWork& work) {
  for (const QuantizedSource& src : work.sources) {
    const QuantizedDestination& q = work.specs[static_cast<size_t>(src.destination)];
    const int64_t n = q.tile == 0 ? 1 : src.grid_rows * src.grid_cols;
    for (int64_t i = src.offset; i < src.offset + n; ++i) {
      work.scales[static_cast<size_t>(i)] =
          TileScale(FloatFromBits(static_cast<uint32_t>(work.amax[static_cast<size_t>(i)])),
                    q.codes, q.scale == DType::kFloat8E8M0FNU);
    }
  }
}

absl::Status AllReduceAmax(QuantizeWork& work, Communicator& comm) {
  const int64_t n = static_cast<int64_t>(work.amax.size());
  SDRT_ASSIGN_OR_RETURN(Tensor amax, Tensor::Empty(IntVector{n}, DType::kInt32));
  std::memcpy(amax.data_ptr(), work.amax.data(), static_cast<size_t>(n) * sizeof(int32_t));
  if (comm.device().is_cpu()) {
    SDRT_RETURN_IF_ERROR(comm.AllReduce(amax, ReduceOp::kMax));
  } else {
    // A device communicator (NCCL) reduces device memory.
    SDRT_ASSIGN_OR_RETURN(Tensor on_device, amax.To(comm.device()));
    SDRT_RETURN_IF_ERROR(comm.AllReduce(on_device, ReduceOp::kMax));
    SDRT_RETURN_IF_ERROR(amax.CopyFrom(on_device));
  }
  std::memcpy(work.amax.data(), amax.data_ptr(), static_cast<size_t>(n) * sizeof(int32_t));
  return absl::OkStatus();
}

}  // namespace

absl::Status SenderScales(QuantizeWork& work, const SourceLocals& locals_of, Communicator& comm) {
  std::fill(work.amax.begin(), work.amax.end(), 0);
  for (const QuantizedSource& src : work.sources) {
    const QuantizedDestination& q = work.specs[static_cast<size_t>(src.destination)];
    SDRT_ASSIGN_OR_RETURN(const auto held_pieces, locals_of(src));
    for (const auto& [held, offsets] : held_pieces) {
      if (held.numel() == 0) continue;
      SDRT_ASSIGN_OR_RETURN(const Tensor local, held.Contiguous());
      Fp8Rows box;
      box.rows = q.tile == 0 ? 1 : local.size(0);
      box.cols = q.tile == 0 ? local.numel() : local.size(1);
      if (q.tile == 0) {
        SDRT_ASSIGN_OR_RETURN(const Tensor flat, local.View(IntVector{1, local.numel()}));
        SDRT_RETURN_IF_ERROR(AccumulateAmax(flat, box, work.amax.data() + src.offset));
        continue;
      }
      box.row0 = offsets[0];
      box.col0 = offsets[1];
      box.tile = q.tile;
      box.grid_cols = src.grid_cols;
      box.grid_entries = src.grid_rows * src.grid_cols;
      SDRT_RETURN_IF_ERROR(AccumulateAmax(local, box, work.amax.data() + src.offset));
    }
  }
  if (!work.amax.empty()) SDRT_RETURN_IF_ERROR(AllReduceAmax(work, comm));
  ScalesFromAmax(work);
  if (work.device_scales.defined()) {
    // The senders' packing reads the scales on their device.
    SDRT_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(IntVector{work.device_scales.numel()},
                                                     DType::kFloat32));
    std::memcpy(host.data_ptr(), work.scales.data(), work.scales.size() * sizeof(float));
    SDRT_RETURN_IF_ERROR(work.device_scales.CopyFrom(host));
  }
  return absl::OkStatus();
}

namespace {

// The scales of a local whose codes the senders made: each view's blocks from its source's
// grid, 1 elsewhere.
absl::Status SenderSideScales(const QuantizeWork& work, const QuantizeStep& step,
                              const QuantizeLocal& local) {
  const QuantizedDestination& q = step.spec;
  std::vector<float> out(static_cast<size_t>(local.scales.numel()), 1.0f);
  if (q.tile == 0) {
    if (!out.empty()) out[0] = work.scales[static_cast<size_t>(step.grid_offset)];
  } else {
    const int64_t scale_cols = local.scales.size(1);
    for (const QuantizeView& v : local.views) {
      const QuantizedSource& src = work.sources[static_cast<size_t>(v.source)];
      const int64_t rows = (v.length + q.tile - 1) / q.tile;
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < scale_cols; ++j) {
          const int64_t from = src.offset + (v.offsets[0] / q.tile + i) * src.grid_cols +
                               v.offsets[1] / q.tile + j;
          out[static_cast<size_t>((v.start / q.tile + i) * scale_cols + j)] =
              work.scales[static_cast<size_t>(from)];
        }
      }
    }
  }
  return WriteScales(local.scales, 0, out.data(), static_cast<int64_t>(out.size()));
}

// Quantizes a local's staging here: per view its blocks' amax, scales and codes (one scale
// per tensor: the agreed `tensor_scale`), the scales written beside, 1 where no view is.
absl::Status ReceiverSideQuantize(const QuantizeStep& step, const QuantizeLocal& local,
                                  float tensor_scale) {
  const QuantizedDestination& q = step.spec;
  const int64_t cols = RowElements(local.staging);
  std::vector<float> out(static_cast<size_t>(local.scales.numel()), 1.0f);
  if (q.tile == 0 && !out.empty()) out[0] = tensor_scale;
  for (const QuantizeView& v : local.views) {
    const Fp8Rows box = ViewRows(v, cols, q.tile);
    if (q.tile == 0) {
      SDRT_RETURN_IF_ERROR(QuantizeRows(local.staging, box, &tensor_scale, local.codes));
      continue;
    }
    std::vector<int32_t> amax(static_cast<size_t>(box.grid_entries), 0);
    SDRT_RETURN_IF_ERROR(AccumulateAmax(local.staging, box, amax.data()));
    std::vector<float> grid(amax.size());
    for (size_t i = 0; i < amax.size(); ++i) {
      grid[i] = TileScale(FloatFromBits(static_cast<uint32_t>(amax[i])), q.codes,
                          q.scale == DType::kFloat8E8M0FNU);
    }
    SDRT_RETURN_IF_ERROR(QuantizeRows(local.staging, box, grid.data(), local.codes));
    const int64_t first = (v.start / q.tile) * box.grid_cols;
    if (first + box.grid_entries > static_cast<int64_t>(out.size())) {
      return absl::InvalidArgumentError(absl::StrCat("FP8: '", q.path, "' has ", out.size(),
                                                     " scales; a view needs ",
                                                     first + box.grid_entries));
    }
    std::copy(grid.begin(), grid.end(), out.begin() + first);
  }
  return WriteScales(local.scales, 0, out.data(), static_cast<int64_t>(out.size()));
}

}  // namespace

absl::Status FinishQuantized(QuantizeWork& work, Communicator* comm) {
  if (!work.on_senders && work.per_tensor) {
    // A tensor's scale: its amax over every rank's views.
    std::fill(work.amax.begin(), work.amax.end(), 0);
    for (const QuantizeStep& step : work.steps) {
      if (step.spec.tile != 0) continue;
      for (const QuantizeLocal& local : step.locals) {
        for (const QuantizeView& v : local.views) {
          SDRT_RETURN_IF_ERROR(AccumulateAmax(local.staging,
                                              ViewRows(v, RowElements(local.staging), 0),
                                              work.amax.data() + step.grid_offset));
        }
      }
    }
    SDRT_RETURN_IF_ERROR(AllReduceAmax(work, *comm));
    ScalesFromAmax(work);
  }
  for (const QuantizeStep& step : work.steps) {
    for (const QuantizeLocal& local : step.locals) {
      if (work.on_senders) {
        SDRT_RETURN_IF_ERROR(SenderSideScales(work, step, local));
      } else {
        SDRT_RETURN_IF_ERROR(ReceiverSideQuantize(
            step, local, work.scales.empty() ? 1.0f : work.scales[static_cast<size_t>(step.grid_offset)]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
