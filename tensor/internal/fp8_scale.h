// Block FP8 (issue 30; docs/PLAN.md, "Next: FP8 with scales"): the arithmetic of quantizing
// bfloat16 / float16 / float32 values to float8_e4m3fn or float8_e5m2 with a float32 scale per
// tile (128 x 128 in DeepSeek-V3's checkpoints, or one per tensor), the scale stored as
// float32 or as float8_e8m0fnu (a power of two), and of dequantizing them back. The recipe,
// as PyTorch ops write it (tests/golden/make_fp8_quant_golden.py checks it bit for bit):
//   amax  = tile.float().abs().amax()          (NaN when the tile holds one)
//   scale = amax / finfo(fp8).max in float32, 1 for an all-zero tile; with e8m0 scales
//           rounded up to the next power of two (a power of two stays), at least 2^-127
//   q     = (tile.float() / scale).to(fp8)     (float_cast.h's rounding and saturation)
//   x'    = (q.float() * scale).to(dtype)
// The per-element steps are host and device code (SDRT_HD); the loops are host code. The
// weight map's FP8 destinations use them (core/distributed/internal/mapping/quantize.h).
// Not API: in namespace sdrt::internal.
#ifndef SDRT_TENSOR_INTERNAL_FP8_SCALE_H_
#define SDRT_TENSOR_INTERNAL_FP8_SCALE_H_

#include <cstdint>

#include "sdrt/tensor/internal/float_cast.h"

namespace sdrt::internal {

// The dtypes of fp8 codes (float8_e4m3fn, float8_e5m2), and those the recipe quantizes from
// and dequantizes into (float32, bfloat16, float16).
SDRT_HD constexpr bool IsFp8Codes(DType d) {
  return d == DType::kFloat8E4M3FN || d == DType::kFloat8E5M2;
}
SDRT_HD constexpr bool IsFp8Wide(DType d) {
  return d == DType::kFloat32 || d == DType::kBFloat16 || d == DType::kFloat16;
}

// The largest finite magnitude of an fp8 code dtype (448 for e4m3fn, 57344 for e5m2); 0 for
// any other dtype.
SDRT_HD inline float Fp8Max(DType fp8) {
  return fp8 == DType::kFloat8E4M3FN ? 448.0f : fp8 == DType::kFloat8E5M2 ? 57344.0f : 0.0f;
}

// The smallest power of two >= `s` (a positive finite float32, subnormals included); `s`
// itself when it is one. NaN and infinity come back as they are.
SDRT_HD inline float RoundUpToPowerOfTwo(float s) {
  uint32_t bits = FloatBits(s);
  const uint32_t exponent = bits & 0x7f800000u, mantissa = bits & 0x007fffffu;
  if (exponent == 0x7f800000u || mantissa == 0) return s;
  if (exponent != 0) return FloatFromBits((bits & 0x80000000u) | (exponent + 0x00800000u));
  // A subnormal: the next power of two up from its highest mantissa bit.
  uint32_t p = 1;
  while (p < mantissa) p <<= 1;
  return FloatFromBits((bits & 0x80000000u) | p);
}

// The scale of a tile whose absolute maximum is `amax`: amax / Fp8Max(fp8), 1 for 0; rounded
// up to a power of two when `power_of_two` (e8m0 scales), and then at least 2^-127, the
// smallest e8m0 holds (the codes are made with the scale stored).
SDRT_HD inline float TileScale(float amax, DType fp8, bool power_of_two) {
  if (amax == 0.0f) return 1.0f;
  const float s = amax / Fp8Max(fp8);
  if (!power_of_two) return s;
  const float p = RoundUpToPowerOfTwo(s);
  return p < 0x1p-127f ? 0x1p-127f : p;
}

// The entry of a tile grid that element (r, c) of a box falls in: the box's element (0, 0) is
// the tensor's (row0, col0), tiles of `tile` x `tile` over the whole tensor, `grid_cols`
// tiles per row of tiles; 0 for `tile` 0 (one tile).
SDRT_HD inline int64_t BoxTileIndex(int64_t row0, int64_t col0, int64_t tile, int64_t grid_cols,
                                    int64_t r, int64_t c) {
  return tile == 0 ? 0 : ((row0 + r) / tile) * grid_cols + (col0 + c) / tile;
}

// The canonical NaN amax (the bits every NaN amax is stored as, so that each rank's and
// each device's maxima agree bit for bit): above infinity's bits as the order needs.
inline constexpr int32_t kNanAmaxBits = 0x7fc00000;

// How a box is cut into chunks that each lie in one tile (the device's amax reduces a chunk
// per thread block, with one atomic max per chunk): along one dim of the box, `count` box
// elements from global index `origin` (the box's row0 or col0; 0 when `tile` is 0), chunks
// of `edge` = `tile` (or kFp8FreeChunk for `tile` 0) aligned to the global multiples of
// `edge`. Chunk i (0 <= i < ChunkCount) covers box indices [ChunkBegin(i), ChunkBegin(i + 1))
// clipped to [0, count).
inline constexpr int64_t kFp8FreeChunk = 128;
SDRT_HD inline int64_t ChunkEdge(int64_t tile) { return tile > 0 ? tile : kFp8FreeChunk; }
SDRT_HD inline int64_t ChunkCount(int64_t origin, int64_t count, int64_t edge) {
  return count <= 0 ? 0 : (origin + count - 1) / edge - origin / edge + 1;
}
SDRT_HD inline int64_t ChunkBegin(int64_t origin, int64_t count, int64_t edge, int64_t i) {
  const int64_t b = (origin / edge + i) * edge - origin;
  return b < 0 ? 0 : b > count ? count : b;
}

// The largest magnitude of `count` float elements of `dtype` at `data` (host memory, any
// address); NaN when one is NaN, 0 for none. False for a dtype that is not kFloat.
bool AbsMax(const void* data, DType dtype, int64_t count, float* amax);

// q[i] = (x[i] / scale) in `fp8` (e4m3fn or e5m2) for `count` elements of `from_dtype`;
// x'[i] = (q[i] * scale) in `to_dtype`. Host memory, any address, no overlap. False for
// dtypes outside those the recipe takes.
bool QuantizeFloats(const void* from, DType from_dtype, void* to, DType fp8, float scale,
                    int64_t count);
bool DequantizeFloats(const void* from, DType fp8, void* to, DType to_dtype, float scale,
                      int64_t count);

// A row-major [rows, cols] matrix of `from_dtype` quantized tile by tile: tiles of `tile`
// x `tile` elements (ragged at the last row and column of tiles; `tile` 0: the whole
// matrix one tile), the codes at `codes` in the matrix's layout, the scales row-major
// [ceil(rows / tile), ceil(cols / tile)] ([1, 1] for one tile) at `scales` as
// `scale_dtype` (float32, or float8_e8m0fnu: then the scales are powers of two and the
// codes are made with them). DequantizeMatrix undoes it into `to_dtype`. False for dtypes
// outside the recipe's or negative sizes.
bool QuantizeMatrix(const void* from, DType from_dtype, int64_t rows, int64_t cols, int64_t tile,
                    void* codes, DType fp8, void* scales, DType scale_dtype);
bool DequantizeMatrix(const void* codes, DType fp8, const void* scales, DType scale_dtype,
                      int64_t rows, int64_t cols, int64_t tile, void* to, DType to_dtype);

// The pieces of a quantization that several ranks share (the weight sync's FP8 on the
// wire): a box of `rows` x `cols` elements of a 2-D tensor, its element (0, 0) the tensor's
// (row0, col0), row-major at `from` with `row_stride` elements from one row to the next;
// tiles of `tile` x `tile` over the whole tensor (`tile` 0: one tile), `grid_cols` tiles
// per row of tiles. AccumulateTileAmax raises each tile's entry of `amax_bits` (the float
// bits of an amax as int32: ordered as the magnitudes, every NaN as kNanAmaxBits) to the
// box's largest magnitude in that tile. QuantizeBox writes the box's codes row-major at `to` (a
// dense [rows, cols], whatever the input's `row_stride`) with each tile's scale from `scales` (float32, as stored: e8m0 ones
// already powers of two). False for dtypes outside the recipe's or negative sizes.
bool AccumulateTileAmax(const void* from, DType dtype, int64_t rows, int64_t cols,
                        int64_t row_stride, int64_t row0, int64_t col0, int64_t tile,
                        int64_t grid_cols, int32_t* amax_bits);
bool QuantizeBox(const void* from, DType from_dtype, int64_t rows, int64_t cols,
                 int64_t row_stride, int64_t row0, int64_t col0, int64_t tile, int64_t grid_cols,
                 const float* scales, void* to, DType fp8);
// The inverse of QuantizeBox: the box's codes (`fp8`, rows `row_stride` apart) times their
// tile's scale, from `scales` read as `scale_dtype` (float32 or float8_e8m0fnu), written
// row-major and dense at `to` as `to_dtype`.
bool DequantizeBox(const void* codes, DType fp8, int64_t rows, int64_t cols, int64_t row_stride,
                   int64_t row0, int64_t col0, int64_t tile, int64_t grid_cols,
                   const void* scales, DType scale_dtype, void* to, DType to_dtype);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_INTERNAL_FP8_SCALE_H_
