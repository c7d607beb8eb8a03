#include "sdrt/core/distributed/internal/mapping/dequantize.h"

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/fp8_boxes.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

absl::StatusOr<std::optional<DequantizedSource>> FindDequantized(
    const LeafLayout& source, DType destination_dtype,
    const std::function<const LeafLayout*(const std::string&)>& find_source) {
  if (!IsFp8Codes(source.dtype) || !IsFp8Wide(destination_dtype)) return std::nullopt;
  DequantizedSource d;
  d.name = source.path;
  d.codes = source.dtype;
  d.shape = source.shape;
  SDRT_ASSIGN_OR_RETURN(const Fp8Scales scales, FindFp8Scales(source.path, find_source));
  if (scales.layout == nullptr) return std::nullopt;  // no scales: a plain cast
  const LeafLayout* scale = scales.layout;
  d.scale_name = scales.name;
  d.tile = scales.tile;
  const std::string where = absl::StrCat("FP8: '", d.name, "' with '", d.scale_name, "'");
  IntVector want{1};
  if (d.tile > 0) {
    if (d.shape.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": block scales are for 2-D weights; it is ", ShapeToString(d.shape)));
    }
    want = {(d.shape[0] + d.tile - 1) / d.tile, (d.shape[1] + d.tile - 1) / d.tile};
  }
  int64_t n = 1;
  for (int64_t s : scale->shape) n *= s;
  if (d.tile > 0 ? scale->shape != want : n != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": the scales are ", ShapeToString(scale->shape), ", not ",
        d.tile > 0 ? ShapeToString(want) : "one element"));
  }
  d.scale = scale->dtype;
  d.scale_shape = scale->shape;
  return std::optional<DequantizedSource>(std::move(d));
}

absl::Status FinishDequantized(const DequantizeWork& work) {
  for (const DequantizeLocal& local : work.locals) {
    const int64_t cols = local.staging.dim() == 0 || local.staging.size(0) == 0
                             ? 1
                             : local.staging.numel() / local.staging.size(0);
    for (const QuantizeView& v : local.views) {
      const DequantizedSource& src = work.sources[static_cast<size_t>(v.source)];
      const Tensor& scales = work.scales[static_cast<size_t>(v.source)];
      if (!scales.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("FP8: this rank has no scales of '", src.name, "'"));
      }
      Fp8Rows box;
      box.first = v.start;
      box.rows = v.length;
      box.cols = cols;
      if (src.tile > 0) {
        box.row0 = v.offsets[0];
        box.col0 = v.offsets[1];
        box.tile = src.tile;
        box.grid_cols = src.scale_shape[1];
        box.grid_entries = src.scale_shape[0] * src.scale_shape[1];
      }
      SDRT_RETURN_IF_ERROR(DequantizeRows(local.staging, box, scales, local.values));
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
