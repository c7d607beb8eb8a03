#include "sdrt/core/distributed/internal/mapping/fp8_boxes.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/backend/fp8_box.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The op over `box` of `from` with the box's grid; InvalidArgument when the box is not
// within the contiguous local.
absl::StatusOr<Fp8BoxOp> BoxOp(Fp8BoxOp::Kind kind, const Tensor& from, const Fp8Rows& box) {
  const int64_t row = from.dim() == 0 || from.size(0) == 0 ? 1 : from.numel() / from.size(0);
  const int64_t rows = from.dim() == 0 ? 1 : from.size(0);
  if (!from.is_contiguous() || box.cols != row || box.first < 0 || box.rows < 0 ||
      box.first > rows - box.rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FP8: rows [", box.first, ", ", box.first + box.rows, ") of ", box.cols,
        " elements are not within the contiguous local ", from.ToString()));
  }
  Fp8BoxOp op;
  op.kind = kind;
  op.src = static_cast<const char*>(from.data_ptr()) +
           box.first * box.cols * (ElementBits(from.dtype()) / 8);
  op.src_dtype = from.dtype();
  op.src_row_stride = box.cols;
  op.rows = box.rows;
  op.cols = box.cols;
  op.row0 = box.row0;
  op.col0 = box.col0;
  op.tile = box.tile;
  op.grid_cols = box.grid_cols;
  op.grid_entries = box.grid_entries;
  return op;
}

// `to`'s rows of the box: InvalidArgument unless it matches `from`'s device and width.
absl::StatusOr<void*> RowsOf(const Tensor& to, const Tensor& from, const Fp8Rows& box) {
  if (!to.is_contiguous() || to.device() != from.device() || to.numel() != from.numel() ||
      to.shape() != from.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("FP8: ", to.ToString(), " does not match ",
                                                   from.ToString()));
  }
  return static_cast<char*>(to.data_ptr()) + box.first * box.cols * (ElementBits(to.dtype()) / 8);
}

}  // namespace

absl::Status AccumulateAmax(const Tensor& values, const Fp8Rows& box, int32_t* amax_bits) {
  SDRT_ASSIGN_OR_RETURN(Fp8BoxOp op, BoxOp(Fp8BoxOp::Kind::kTileAmax, values, box));
  op.dst_dtype = DType::kInt32;
  if (box.rows == 0 || box.cols == 0) return absl::OkStatus();
  if (values.device().is_cpu()) {
    op.dst = amax_bits;
    return RunFp8Box(op, values.device());
  }
  // The device raises a zeroed copy of the grid; the host takes the larger of each entry.
  SDRT_ASSIGN_OR_RETURN(Tensor grid, Tensor::Zeros(IntVector{box.grid_entries}, DType::kInt32,
                                                   values.device()));
  op.dst = grid.data_ptr();
  SDRT_RETURN_IF_ERROR(RunFp8Box(op, values.device()));
  SDRT_ASSIGN_OR_RETURN(const Tensor host, grid.To(Device::CPU()));
  const int32_t* const got = host.data<int32_t>();
  for (int64_t i = 0; i < box.grid_entries; ++i) amax_bits[i] = std::max(amax_bits[i], got[i]);
  return absl::OkStatus();
}

absl::Status QuantizeRows(const Tensor& values, const Fp8Rows& box, const float* scales,
                          const Tensor& codes) {
  SDRT_ASSIGN_OR_RETURN(Fp8BoxOp op, BoxOp(Fp8BoxOp::Kind::kQuantize, values, box));
  SDRT_ASSIGN_OR_RETURN(op.dst, RowsOf(codes, values, box));
  op.dst_dtype = codes.dtype();
  op.scale_dtype = DType::kFloat32;
  if (box.rows == 0 || box.cols == 0) return absl::OkStatus();
  Tensor on_device;
  op.scales = scales;
  if (!values.device().is_cpu()) {
    SDRT_ASSIGN_OR_RETURN(on_device, Tensor::Empty(IntVector{box.grid_entries}, DType::kFloat32));
    std::memcpy(on_device.data_ptr(), scales, static_cast<size_t>(box.grid_entries) * sizeof(float));
    SDRT_ASSIGN_OR_RETURN(on_device, on_device.To(values.device()));
    op.scales = on_device.data_ptr();
  }
  return RunFp8Box(op, values.device());
}

absl::Status DequantizeRows(const Tensor& codes, const Fp8Rows& box, const Tensor& scales,
                            const Tensor& values) {
  SDRT_ASSIGN_OR_RETURN(Fp8BoxOp op, BoxOp(Fp8BoxOp::Kind::kDequantize, codes, box));
  SDRT_ASSIGN_OR_RETURN(op.dst, RowsOf(values, codes, box));
  op.dst_dtype = values.dtype();
  if (!scales.is_contiguous() || scales.numel() < box.grid_entries) {
    return absl::InvalidArgumentError(absl::StrCat("FP8: scales ", scales.ToString(), " for a grid of ",
                                                   box.grid_entries, " tiles"));
  }
  op.scale_dtype = scales.dtype();
  if (box.rows == 0 || box.cols == 0) return absl::OkStatus();
  Tensor moved;
  op.scales = scales.data_ptr();
  if (scales.device() != codes.device()) {
    SDRT_ASSIGN_OR_RETURN(moved, scales.To(codes.device()));
    op.scales = moved.data_ptr();
  }
  return RunFp8Box(op, codes.device());
}

absl::Status WriteScales(const Tensor& scales, int64_t at, const float* values, int64_t count) {
  if (count <= 0) return absl::OkStatus();
  if (!scales.is_contiguous() || at < 0 || at > scales.numel() - count) {
    return absl::InvalidArgumentError(absl::StrCat("FP8: scales [", at, ", ", at + count,
                                                   ") of ", scales.ToString()));
  }
  const bool f32 = scales.dtype() == DType::kFloat32;
  if (!f32 && scales.dtype() != DType::kFloat8E8M0FNU) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8: scales are float32 or float8_e8m0fnu, not ", scales.ToString()));
  }
  const auto fill = [&](void* out) {
    if (f32) {
      std::memcpy(out, values, static_cast<size_t>(count) * sizeof(float));
      return;
    }
    uint8_t* const codes = static_cast<uint8_t*>(out);
    for (int64_t i = 0; i < count; ++i) codes[i] = FloatToFloat8E8M0FNU(values[i]);
  };
  const int64_t bytes = f32 ? 4 : 1;
  if (scales.device().is_cpu()) {
    fill(static_cast<char*>(scales.data_ptr()) + at * bytes);
    return absl::OkStatus();
  }
  SDRT_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(IntVector{count}, scales.dtype()));
  fill(host.data_ptr());
  SDRT_ASSIGN_OR_RETURN(const Tensor flat, scales.View(IntVector{scales.numel()}));
  SDRT_ASSIGN_OR_RETURN(Tensor part, flat.Narrow(0, at, count));
  return part.CopyFrom(host);
}

}  // namespace sdrt::internal
