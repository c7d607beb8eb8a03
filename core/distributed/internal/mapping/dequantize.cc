#include "sdrt/core/distributed/internal/mapping/dequantize.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Scale `i` of a float32 or float8_e8m0fnu scale tensor, as a float.
float ScaleAt(const Tensor& scales, int64_t i) {
  return scales.dtype() == DType::kFloat32
             ? scales.data<float>()[i]
             : Float8E8M0FNUToFloat(static_cast<const uint8_t*>(scales.data_ptr())[i]);
}

}  // namespace

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
    const DType to = local.values.dtype();
    const int64_t out_bytes = ElementBits(to) / 8;
    const auto* in = static_cast<const uint8_t*>(local.staging.data_ptr());
    auto* out = static_cast<char*>(local.values.data_ptr());
    for (const QuantizeView& v : local.views) {
      const DequantizedSource& src = work.sources[static_cast<size_t>(v.source)];
      const Tensor& scales = work.scales[static_cast<size_t>(v.source)];
      if (!scales.defined()) {
        return absl::InvalidArgumentError(
            absl::StrCat("FP8: this rank has no scales of '", src.name, "'"));
      }
      if (src.tile == 0) {
        DequantizeFloats(in + v.start * cols, src.codes, out + v.start * cols * out_bytes, to,
                         ScaleAt(scales, 0), v.length * cols);
        continue;
      }
      const int64_t grid_cols = src.scale_shape[1];
      for (int64_t r = 0; r < v.length; ++r) {
        const int64_t row = v.start + r, tile_row = (v.offsets[0] + r) / src.tile;
        for (int64_t c = 0; c < cols;) {
          const int64_t global = v.offsets[1] + c;
          const int64_t end = std::min(cols, (global / src.tile + 1) * src.tile - v.offsets[1]);
          DequantizeFloats(in + row * cols + c, src.codes, out + (row * cols + c) * out_bytes, to,
                           ScaleAt(scales, tile_row * grid_cols + global / src.tile), end - c);
          c = end;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
