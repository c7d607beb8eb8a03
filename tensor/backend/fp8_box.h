// Block FP8 on a box, on whichever device holds it: the three steps a weight map's FP8
// leaves are made of (the tile amax, the quantization with each tile's scale, and the
// dequantization), each over a 2-D box of a tensor whose tiles are counted over the whole
// tensor, so that several ranks' pieces of one tensor make the scales and codes of the
// whole (tensor/internal/fp8_scale.h has the recipe, PyTorch's bit for bit).
//
// RunFp8Box runs an op on the CPU (the host loops of fp8_scale.h) or through the device's
// DeviceBackend (cuda/'s kernels, cuda/fp8_kernels.h), with the same validation and the same
// result bit for bit. Used by the weight map's FP8 work (core/distributed/internal/mapping/)
// and the transfer engine's packing of FP8 codes (core/distributed/internal/engine/pack.cc).
#ifndef SDRT_TENSOR_BACKEND_FP8_BOX_H_
#define SDRT_TENSOR_BACKEND_FP8_BOX_H_

#include <cstdint>

#include "absl/status/status.h"
#include "sdrt/export.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"

namespace sdrt SDRT_API {

// One op over a box of `rows` x `cols` elements whose element (0, 0) is the tensor's
// (row0, col0): the box is read row-major at `src`, `src_row_stride` elements from one row
// to the next (>= cols); tiles are `tile` x `tile` over the whole tensor (0: the tensor is
// one tile), the grid of their entries row-major with `grid_cols` entries per row of tiles
// and `grid_entries` entries in all (every tile the box touches must be one of them).
// Pointers are of the device the op runs on, aligned to their element size.
struct Fp8BoxOp {
  enum class Kind : uint8_t {
    // Raises each grid entry of `dst` (int32: a float's bits, sign cleared, so ordered as the
    // magnitudes; every NaN stored as 0x7fc00000, above infinity) to the largest
    // magnitude of the box's elements in that tile. `src_dtype` float32, bfloat16 or
    // float16; `dst_dtype` int32; no scales.
    kTileAmax,
    // Writes the box's codes row-major and dense ([rows, cols]) at `dst` (`dst_dtype`
    // float8_e4m3fn or float8_e5m2): x / scale of its tile, the scale read from `scales`
    // (float32). `src_dtype` float32, bfloat16 or float16.
    kQuantize,
    // Writes q * scale row-major and dense at `dst` (`dst_dtype` float32, bfloat16 or
    // float16) for the box's codes (`src_dtype` float8_e4m3fn or float8_e5m2), the scale read
    // from `scales` as `scale_dtype` (float32 or float8_e8m0fnu).
    kDequantize,
  };
  Kind kind = Kind::kTileAmax;
  const void* src = nullptr;
  DType src_dtype = DType::kFloat32;
  int64_t src_row_stride = 0;
  void* dst = nullptr;
  DType dst_dtype = DType::kInt32;
  const void* scales = nullptr;
  DType scale_dtype = DType::kFloat32;
  int64_t rows = 0, cols = 0, row0 = 0, col0 = 0;
  int64_t tile = 0, grid_cols = 1, grid_entries = 1;
};

// Runs `op` on `device`: on the CPU by the host loops, in the calling thread; on a CUDA
// device by its kernels, enqueued on `stream` (of `device`; nullptr: its legacy default
// stream) and, unless `non_blocking`, complete when it returns (the caller keeps every
// buffer alive until then). An empty box does nothing. InvalidArgument for dtypes outside
// those of the op's kind, negative sizes or offsets, a row stride below `cols`, a grid
// that lacks a tile the box touches, a null or misaligned pointer of a non-empty box;
// FailedPrecondition without the device's backend; the backend's errors.
absl::Status RunFp8Box(const Fp8BoxOp& op, Device device, StreamHandle stream = nullptr,
                       bool non_blocking = false);

// The checks RunFp8Box makes before it runs anything, for the device kernels' own entry
// (cuda/fp8_kernels.h) to make the same ones: OK or InvalidArgument prefixed by `who`.
absl::Status ValidateFp8Box(const Fp8BoxOp& op, const char* who);

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_FP8_BOX_H_
