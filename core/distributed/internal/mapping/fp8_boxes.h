// The weight map's FP8 steps on tensors of any device (issue 30, "FP8 on CUDA"): the amax of
// tiles, the quantization and the dequantization of row ranges of a contiguous local, each
// one RunFp8Box (tensor/backend/fp8_box.h) on the local's device, with the small tile grids
// (amaxes, scales) kept on the host where the all-reduce and the scale recipe use them and
// carried to the device around the op. Blocking: each call is complete when it returns.
// Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_FP8_BOXES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_FP8_BOXES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Rows [first, first + rows) of a contiguous local (its elements past dim 0 are one row of
// `cols`), whose element (first, 0) is the tensor's (row0, col0) in a grid of tiles of
// `tile` x `tile` (0: one), `grid_cols` a row, `grid_entries` in all.
struct Fp8Rows {
  int64_t first = 0, rows = 0, cols = 0;
  int64_t row0 = 0, col0 = 0, tile = 0, grid_cols = 1, grid_entries = 1;
};

// Raises the host grid `amax_bits` (grid_entries int32: fp8_scale.h's ordered bits) to the
// largest magnitude of `box` of `values` (float32, bfloat16 or float16) in each tile.
// InvalidArgument for a local that is not contiguous or a box outside it; RunFp8Box's and
// the device's errors.
absl::Status AccumulateAmax(const Tensor& values, const Fp8Rows& box, int32_t* amax_bits);

// Writes the codes of `box` of `values` into the same rows of `codes` (a contiguous local of
// float8_e4m3fn / e5m2 on the same device and of the same row width), each with the scale
// of its tile from the host grid `scales` (grid_entries float32). Errors as AccumulateAmax.
absl::Status QuantizeRows(const Tensor& values, const Fp8Rows& box, const float* scales,
                          const Tensor& codes);

// Writes q x scale of `box` of `codes` into the same rows of `values` (same device, same row
// width), the scale of each tile from `scales` (a contiguous tensor of grid_entries float32
// or float8_e8m0fnu scales, of any device). Errors as AccumulateAmax.
absl::Status DequantizeRows(const Tensor& codes, const Fp8Rows& box, const Tensor& scales,
                            const Tensor& values);

// Writes `count` float32 scales (host memory) into the contiguous scale local `scales`
// (float32, or float8_e8m0fnu rounded as FloatToFloat8E8M0FNU) of any device, from its
// element `at` on. Tensor::CopyFrom's errors.
absl::Status WriteScales(const Tensor& scales, int64_t at, const float* values, int64_t count);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_FP8_BOXES_H_
