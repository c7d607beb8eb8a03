#include "sdrt/core/distributed/internal/mapping/quantize.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}


// The bits of a non-negative float as an int32: ordered as the floats, NaN above infinity,
// so that a max of the bits is the max of the magnitudes with NaN kept (as amax keeps it).
int32_t OrderedBits(float magnitude) { return static_cast<int32_t>(FloatBits(magnitude)); }

// Writes `scale` as element `i` of a float32 or float8_e8m0fnu scale local.
void StoreScale(const Tensor& scales, int64_t i, float scale) {
  if (scales.dtype() == DType::kFloat32) {
    static_cast<float*>(scales.data_ptr())[i] = scale;
  } else {
    static_cast<uint8_t*>(scales.data_ptr())[i] = FloatToFloat8E8M0FNU(scale);
  }
}

// The elements of one row along dim 0.
int64_t RowElements(const Tensor& t) {
  return t.dim() == 0 || t.size(0) == 0 ? 1 : t.numel() / t.size(0);
}

// The largest magnitude of the rows of `local` its views cover (0 for none).
float LocalAmax(const QuantizeLocal& local) {
  const int64_t cols = RowElements(local.staging);
  const int64_t bytes = ElementBits(local.staging.dtype()) / 8;
  float amax = 0.0f;
  for (const QuantizeView& v : local.views) {
    float part = 0.0f;
    AbsMax(static_cast<const char*>(local.staging.data_ptr()) + v.start * cols * bytes,
           local.staging.dtype(), v.length * cols, &part);
    if (OrderedBits(part) > OrderedBits(amax)) amax = part;
  }
  return amax;
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
  const absl::StatusOr<Leaves> leaves = CollectLeaves(tree);
  if (!leaves.ok()) return false;  // the load reports it
  for (const Leaf& leaf : *leaves) {
    const Value& v = *leaf.value;
    const bool codes = (v.kind() == ValueKind::kTensor && IsFp8Codes(v.as_tensor().dtype())) ||
                       (v.kind() == ValueKind::kDTensor && IsFp8Codes(v.as_dtensor().dtype())) ||
                       (v.kind() == ValueKind::kShardedTensor && IsFp8Codes(v.as_sharded().dtype()));
    if (codes) return true;
  }
  return false;
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
  SDRT_RETURN_IF_ERROR(comm.AllReduce(amax, ReduceOp::kMax));
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
      int32_t* const grid = work.amax.data() + src.offset;
      if (q.tile == 0) {
        AccumulateTileAmax(local.data_ptr(), local.dtype(), 1, local.numel(), local.numel(), 0, 0,
                           0, 1, grid);
      } else {
        AccumulateTileAmax(local.data_ptr(), local.dtype(), local.size(0), local.size(1),
                           local.size(1), offsets[0], offsets[1], q.tile, src.grid_cols, grid);
      }
    }
  }
  if (!work.amax.empty()) SDRT_RETURN_IF_ERROR(AllReduceAmax(work, comm));

  ScalesFromAmax(work);
  return absl::OkStatus();
}

absl::Status FinishQuantized(QuantizeWork& work, Communicator* comm) {
  if (!work.on_senders && work.per_tensor) {
    // A tensor's scale: its amax over every rank's views.
    std::fill(work.amax.begin(), work.amax.end(), 0);
    for (const QuantizeStep& step : work.steps) {
      if (step.spec.tile != 0) continue;
      int32_t& bits = work.amax[static_cast<size_t>(step.grid_offset)];
      for (const QuantizeLocal& local : step.locals) {
        bits = std::max(bits, OrderedBits(LocalAmax(local)));
      }
    }
    SDRT_RETURN_IF_ERROR(AllReduceAmax(work, *comm));
    ScalesFromAmax(work);
  }
  for (const QuantizeStep& step : work.steps) {
    const QuantizedDestination& q = step.spec;
    for (const QuantizeLocal& local : step.locals) {
      const int64_t scales = local.scales.numel();
      for (int64_t i = 0; i < scales; ++i) StoreScale(local.scales, i, 1.0f);
      if (q.tile == 0) {
        const float scale = work.scales[static_cast<size_t>(step.grid_offset)];
        if (scales > 0) StoreScale(local.scales, 0, scale);
        if (work.on_senders) continue;
        const int64_t cols = RowElements(local.staging);
        const int64_t in_bytes = ElementBits(local.staging.dtype()) / 8;
        for (const QuantizeView& v : local.views) {
          QuantizeFloats(static_cast<const char*>(local.staging.data_ptr()) +
                             v.start * cols * in_bytes,
                         local.staging.dtype(), static_cast<char*>(local.codes.data_ptr()) +
                                                    v.start * cols,
                         q.codes, scale, v.length * cols);
        }
        continue;
      }
      const int64_t scale_cols = local.scales.size(1);
      if (work.on_senders) {
        // The blocks of each view, from the grid of its source.
        for (const QuantizeView& v : local.views) {
          const QuantizedSource& src = work.sources[static_cast<size_t>(v.source)];
          const int64_t rows = (v.length + q.tile - 1) / q.tile;
          for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < scale_cols; ++j) {
              const int64_t from = src.offset + (v.offsets[0] / q.tile + i) * src.grid_cols +
                                   v.offsets[1] / q.tile + j;
              StoreScale(local.scales, (v.start / q.tile + i) * scale_cols + j,
                         work.scales[static_cast<size_t>(from)]);
            }
          }
        }
        continue;
      }
      const int64_t cols = RowElements(local.staging);
      const int64_t in_bytes = ElementBits(local.staging.dtype()) / 8;
      const int64_t scale_bytes = ElementBits(q.scale) / 8;
      for (const QuantizeView& v : local.views) {
        QuantizeMatrix(static_cast<const char*>(local.staging.data_ptr()) + v.start * cols * in_bytes,
                       local.staging.dtype(), v.length, cols, q.tile,
                       static_cast<char*>(local.codes.data_ptr()) + v.start * cols, q.codes,
                       static_cast<char*>(local.scales.data_ptr()) +
                           (v.start / q.tile) * scale_cols * scale_bytes,
                       q.scale);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
