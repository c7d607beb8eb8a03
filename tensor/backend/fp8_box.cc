#include "sdrt/tensor/backend/fp8_box.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using Kind = Fp8BoxOp::Kind;

bool Aligned(const void* p, DType dtype) {
  const int64_t bytes = ElementBits(dtype) / 8;
  return bytes <= 1 || reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(bytes) == 0;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kTileAmax:
      return "tile amax";
    case Kind::kQuantize:
      return "quantization";
    case Kind::kDequantize:
      return "dequantization";
  }
  return "op";
}

}  // namespace

absl::Status ValidateFp8Box(const Fp8BoxOp& op, const char* who) {
  const auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": FP8 ", KindName(op.kind), ": ", what));
  };
  bool dtypes = false;
  switch (op.kind) {
    case Kind::kTileAmax:
      dtypes = internal::IsFp8Wide(op.src_dtype) && op.dst_dtype == DType::kInt32;
      break;
    case Kind::kQuantize:
      dtypes = internal::IsFp8Wide(op.src_dtype) && internal::IsFp8Codes(op.dst_dtype) &&
               op.scale_dtype == DType::kFloat32;
      break;
    case Kind::kDequantize:
      dtypes = internal::IsFp8Codes(op.src_dtype) && internal::IsFp8Wide(op.dst_dtype) &&
               (op.scale_dtype == DType::kFloat32 || op.scale_dtype == DType::kFloat8E8M0FNU);
      break;
    default:
      return bad("no such op");
  }
  if (!dtypes) {
    return bad(absl::StrCat("no op from ", DTypeName(op.src_dtype), " into ",
                            DTypeName(op.dst_dtype), " with ", DTypeName(op.scale_dtype),
                            " scales"));
  }
  if (op.rows < 0 || op.cols < 0 || op.row0 < 0 || op.col0 < 0 || op.tile < 0 ||
      op.grid_cols < 1 || op.grid_entries < 1) {
    return bad(absl::StrCat("negative sizes: box ", op.rows, " x ", op.cols, " at (", op.row0,
                            ", ", op.col0, "), tile ", op.tile, ", grid of ", op.grid_entries,
                            " entries, ", op.grid_cols, " a row"));
  }
  if (op.rows == 0 || op.cols == 0) return absl::OkStatus();
  // Every bound below keeps the sums in int64: sizes above 2^62 are refused first.
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (op.rows > kLimit / op.cols || op.row0 > kLimit - op.rows || op.col0 > kLimit - op.cols ||
      op.src_row_stride > kLimit / op.rows) {
    return bad("the box does not fit in 2^62 elements");
  }
  if (op.rows > 1 && op.src_row_stride < op.cols) {
    return bad(absl::StrCat("a row stride of ", op.src_row_stride, " for rows of ", op.cols));
  }
  if (op.tile > 0) {
    const int64_t last_row = (op.row0 + op.rows - 1) / op.tile;
    const int64_t last_col = (op.col0 + op.cols - 1) / op.tile;
    if (last_col >= op.grid_cols || last_row >= op.grid_entries / op.grid_cols) {
      return bad(absl::StrCat("tile (", last_row, ", ", last_col, ") is not in a grid of ",
                              op.grid_entries, " entries, ", op.grid_cols, " a row"));
    }
  }
  if (op.src == nullptr || op.dst == nullptr ||
      (op.kind != Kind::kTileAmax && op.scales == nullptr)) {
    return bad("a null pointer");
  }
  if (!Aligned(op.src, op.src_dtype) || !Aligned(op.dst, op.dst_dtype) ||
      (op.scales != nullptr && !Aligned(op.scales, op.scale_dtype))) {
    return bad("a pointer not aligned to its element size");
  }
  return absl::OkStatus();
}

absl::Status RunFp8Box(const Fp8BoxOp& op, Device device, StreamHandle stream,
                       bool non_blocking) {
  SDRT_RETURN_IF_ERROR(ValidateFp8Box(op, "RunFp8Box"));
  if (op.rows == 0 || op.cols == 0) return absl::OkStatus();
  if (!device.is_cpu()) {
    SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
    return backend->Fp8Box(op, device, stream, non_blocking);
  }
  bool ok = false;
  switch (op.kind) {
    case Kind::kTileAmax:
      ok = internal::AccumulateTileAmax(op.src, op.src_dtype, op.rows, op.cols,
                                        op.src_row_stride, op.row0, op.col0, op.tile,
                                        op.grid_cols, static_cast<int32_t*>(op.dst));
      break;
    case Kind::kQuantize:
      ok = internal::QuantizeBox(op.src, op.src_dtype, op.rows, op.cols, op.src_row_stride,
                                 op.row0, op.col0, op.tile, op.grid_cols,
                                 static_cast<const float*>(op.scales), op.dst, op.dst_dtype);
      break;
    case Kind::kDequantize:
      ok = internal::DequantizeBox(op.src, op.src_dtype, op.rows, op.cols, op.src_row_stride,
                                   op.row0, op.col0, op.tile, op.grid_cols, op.scales,
                                   op.scale_dtype, op.dst, op.dst_dtype);
      break;
  }
  if (!ok) return absl::InternalError("RunFp8Box: the host loop refused a checked op");
  return absl::OkStatus();
}

}  // namespace sdrt
