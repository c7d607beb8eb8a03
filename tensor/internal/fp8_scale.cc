#include "sdrt/tensor/internal/fp8_scale.h"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <vector>

namespace sdrt::internal {
namespace {


// Element i of float dtype D at `p`, widened.
template <DType D>
float Load(const char* p, int64_t i) {
  using Bits = typename FloatCodec<D>::Bits;
  Bits b;
  std::memcpy(&b, p + i * static_cast<int64_t>(sizeof(Bits)), sizeof(b));
  return FloatCodec<D>::Widen(b);
}

template <DType D>
void Store(char* p, int64_t i, float v) {
  using Bits = typename FloatCodec<D>::Bits;
  const Bits b = FloatCodec<D>::Narrow(v);
  std::memcpy(p + i * static_cast<int64_t>(sizeof(Bits)), &b, sizeof(b));
}

// The hot loops below are built for the CPU they run on as well: AVX-512 and AVX2 clones
// beside the baseline, chosen once at load time (GCC's and Clang's target_clones).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define SDRT_FP8_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SDRT_FP8_CLONES
#endif

// The largest magnitude's bits of `count` bfloat16 (float32) elements: the sign cleared,
// the bits compared as integers (their order is the magnitudes'), in a loop the compiler
// vectorizes. Above 0x7f80 (0x7f800000) one is NaN.
SDRT_FP8_CLONES uint32_t MaxMagnitudeBits(const uint16_t* p, int64_t count) {
  int16_t m = 0;  // 15 bits: a signed max, which every x86 vector unit has
  for (int64_t i = 0; i < count; ++i) m = std::max<int16_t>(m, static_cast<int16_t>(p[i] & 0x7fff));
  return static_cast<uint32_t>(m);
}
SDRT_FP8_CLONES uint32_t MaxMagnitudeBits(const uint32_t* p, int64_t count) {
  int32_t m = 0;
  for (int64_t i = 0; i < count; ++i) {
    m = std::max<int32_t>(m, static_cast<int32_t>(p[i] & 0x7fffffffu));
  }
  return static_cast<uint32_t>(m);
}

// float8_e4m3fn's code of `f`, exactly as FloatToFloat8E4M3FN (float_cast.h) makes it,
// without a branch (selects), so that a loop of it vectorizes: a normal result by
// rounding float32's bits to 3 mantissa bits (ties to even, the carry into the exponent
// as it falls), a subnormal one (below 2^-6) by rounding |f| * 2^9 to an integer through
// 2^23's float (the default rounding: to nearest even), past 448 the saturated 0x7e, NaN
// 0x7f; the sign on top.
inline uint8_t E4M3(float f) {
  const uint32_t bits = FloatBits(f);
  const uint32_t m = bits & 0x7fffffffu;
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t normal =
      std::min<uint32_t>((m - (120u << 23) + 0x7ffffu + ((m >> 20) & 1u)) >> 20, 0x7eu);
  const uint32_t sub = FloatBits(FloatFromBits(m) * 512.0f + 8388608.0f) - 0x4b000000u;
  // Masks, not branches: all ones where the case holds.
  const uint32_t is_sub = 0u - static_cast<uint32_t>(m < 0x3c800000u);
  const uint32_t is_nan = 0u - static_cast<uint32_t>(m > 0x7f800000u);
  const uint32_t code = (((sub & is_sub) | (normal & ~is_sub)) & ~is_nan) | (0x7fu & is_nan);
  return static_cast<uint8_t>(sign | code);
}

SDRT_FP8_CLONES void QuantizeToE4M3(const uint16_t* in, uint8_t* codes, float scale,
                                    int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    codes[i] = E4M3(FloatFromBits(static_cast<uint32_t>(in[i]) << 16) / scale);
  }
}
SDRT_FP8_CLONES void QuantizeToE4M3(const float* in, uint8_t* codes, float scale, int64_t count) {
  for (int64_t i = 0; i < count; ++i) codes[i] = E4M3(in[i] / scale);
}

}  // namespace

bool AbsMax(const void* data, DType dtype, int64_t count, float* amax) {
  const char* p = static_cast<const char*>(data);
  // bfloat16 and float32 without a NaN (aligned): the bits' maximum, vectorized.
  if (dtype == DType::kBFloat16 && reinterpret_cast<uintptr_t>(data) % 2 == 0) {
    const uint32_t m = MaxMagnitudeBits(static_cast<const uint16_t*>(data), count);
    if (m <= 0x7f80u) {
      *amax = FloatFromBits(m << 16);
      return true;
    }
  } else if (dtype == DType::kFloat32 && reinterpret_cast<uintptr_t>(data) % 4 == 0) {
    const uint32_t m = MaxMagnitudeBits(static_cast<const uint32_t*>(data), count);
    if (m <= 0x7f800000u) {
      *amax = FloatFromBits(m);
      return true;
    }
  }
  return VisitFloatDType(dtype, false, [&](auto d) {
    float m = 0.0f;
    for (int64_t i = 0; i < count; ++i) {
      const float v = std::fabs(Load<decltype(d)::value>(p, i));
      if (std::isnan(v)) {
        m = v;
        break;
      }
      if (v > m) m = v;
    }
    *amax = m;
    return true;
  });
}

bool QuantizeFloats(const void* from, DType from_dtype, void* to, DType fp8, float scale,
                    int64_t count) {
  if (!IsFp8Wide(from_dtype) || !IsFp8Codes(fp8)) return false;
  // The common pairs into float8_e4m3fn (aligned input): one vectorized pass.
  uint8_t* const codes = static_cast<uint8_t*>(to);
  if (fp8 == DType::kFloat8E4M3FN && from_dtype == DType::kBFloat16 &&
      reinterpret_cast<uintptr_t>(from) % 2 == 0) {
    QuantizeToE4M3(static_cast<const uint16_t*>(from), codes, scale, count);
    return true;
  }
  if (fp8 == DType::kFloat8E4M3FN && from_dtype == DType::kFloat32 &&
      reinterpret_cast<uintptr_t>(from) % 4 == 0) {
    QuantizeToE4M3(static_cast<const float*>(from), codes, scale, count);
    return true;
  }
  const char* in = static_cast<const char*>(from);
  char* out = static_cast<char*>(to);
  return VisitFloatDType(from_dtype, false, [&](auto f) {
    return VisitFloatDType(fp8, false, [&](auto q) {
      for (int64_t i = 0; i < count; ++i) {
        Store<decltype(q)::value>(out, i, Load<decltype(f)::value>(in, i) / scale);
      }
      return true;
    });
  });
}

bool DequantizeFloats(const void* from, DType fp8, void* to, DType to_dtype, float scale,
                      int64_t count) {
  if (!IsFp8Codes(fp8) || !IsFp8Wide(to_dtype)) return false;
  const char* in = static_cast<const char*>(from);
  char* out = static_cast<char*>(to);
  return VisitFloatDType(fp8, false, [&](auto q) {
    return VisitFloatDType(to_dtype, false, [&](auto t) {
      for (int64_t i = 0; i < count; ++i) {
        Store<decltype(t)::value>(out, i, Load<decltype(q)::value>(in, i) * scale);
      }
      return true;
    });
  });
}

bool QuantizeMatrix(const void* from, DType from_dtype, int64_t rows, int64_t cols, int64_t tile,
                    void* codes, DType fp8, void* scales, DType scale_dtype) {
  if (!IsFp8Wide(from_dtype) || !IsFp8Codes(fp8) || rows < 0 || cols < 0 || tile < 0 ||
      (scale_dtype != DType::kFloat32 && scale_dtype != DType::kFloat8E8M0FNU)) {
    return false;
  }
  // The box steps over the whole matrix: each tile's amax, its scale, the codes.
  const int64_t grid_cols = tile == 0 ? 1 : (cols + tile - 1) / tile;
  const int64_t grid_rows = tile == 0 ? 1 : (rows + tile - 1) / tile;
  const size_t entries = static_cast<size_t>(grid_rows * grid_cols);
  std::vector<int32_t> amax(entries, 0);
  AccumulateTileAmax(from, from_dtype, rows, cols, cols, 0, 0, tile, grid_cols, amax.data());
  const bool e8m0 = scale_dtype == DType::kFloat8E8M0FNU;
  std::vector<float> grid(entries);
  char* const s_out = static_cast<char*>(scales);
  for (size_t i = 0; i < entries; ++i) {
    grid[i] = TileScale(FloatFromBits(static_cast<uint32_t>(amax[i])), fp8, e8m0);
    if (e8m0) {
      Store<DType::kFloat8E8M0FNU>(s_out, static_cast<int64_t>(i), grid[i]);
    } else {
      Store<DType::kFloat32>(s_out, static_cast<int64_t>(i), grid[i]);
    }
  }
  return QuantizeBox(from, from_dtype, rows, cols, cols, 0, 0, tile, grid_cols, grid.data(), codes,
                     fp8);
}

bool DequantizeMatrix(const void* codes, DType fp8, const void* scales, DType scale_dtype,
                      int64_t rows, int64_t cols, int64_t tile, void* to, DType to_dtype) {
  const int64_t grid_cols = tile <= 0 ? 1 : (cols + tile - 1) / tile;
  return DequantizeBox(codes, fp8, rows, cols, cols, 0, 0, tile, grid_cols, scales, scale_dtype,
                       to, to_dtype);
}

bool AccumulateTileAmax(const void* from, DType dtype, int64_t rows, int64_t cols,
                        int64_t row_stride, int64_t row0, int64_t col0, int64_t tile,
                        int64_t grid_cols, int32_t* amax_bits) {
  if (!IsFp8Wide(dtype) || rows < 0 || cols < 0 || row0 < 0 || col0 < 0 || tile < 0) return false;
  const char* const base = static_cast<const char*>(from);
  const int64_t bytes = ElementBits(dtype) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    const char* const row = base + r * row_stride * bytes;
    for (int64_t c = 0; c < cols;) {
      // The columns of this row in one tile.
      const int64_t end = tile == 0 ? cols : std::min(cols, ((col0 + c) / tile + 1) * tile - col0);
      float amax = 0.0f;
      AbsMax(row + c * bytes, dtype, end - c, &amax);
      int32_t& slot = amax_bits[BoxTileIndex(row0, col0, tile, grid_cols, r, c)];
      slot = std::max(slot, std::isnan(amax) ? kNanAmaxBits : static_cast<int32_t>(FloatBits(amax)));
      c = end;
    }
  }
  return true;
}

bool QuantizeBox(const void* from, DType from_dtype, int64_t rows, int64_t cols,
                 int64_t row_stride, int64_t row0, int64_t col0, int64_t tile, int64_t grid_cols,
                 const float* scales, void* to, DType fp8) {
  if (!IsFp8Wide(from_dtype) || !IsFp8Codes(fp8) || rows < 0 || cols < 0 || row0 < 0 || col0 < 0 ||
      tile < 0) {
    return false;
  }
  const char* const in = static_cast<const char*>(from);
  char* const out = static_cast<char*>(to);
  const int64_t bytes = ElementBits(from_dtype) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols;) {
      const int64_t end = tile == 0 ? cols : std::min(cols, ((col0 + c) / tile + 1) * tile - col0);
      const float scale = scales[BoxTileIndex(row0, col0, tile, grid_cols, r, c)];
      QuantizeFloats(in + (r * row_stride + c) * bytes, from_dtype, out + r * cols + c, fp8,
                     scale, end - c);
      c = end;
    }
  }
  return true;
}

bool DequantizeBox(const void* codes, DType fp8, int64_t rows, int64_t cols, int64_t row_stride,
                   int64_t row0, int64_t col0, int64_t tile, int64_t grid_cols,
                   const void* scales, DType scale_dtype, void* to, DType to_dtype) {
  if (!IsFp8Codes(fp8) || !IsFp8Wide(to_dtype) || rows < 0 || cols < 0 || row0 < 0 ||
      col0 < 0 || tile < 0 ||
      (scale_dtype != DType::kFloat32 && scale_dtype != DType::kFloat8E8M0FNU)) {
    return false;
  }
  const char* const in = static_cast<const char*>(codes);
  const char* const s_in = static_cast<const char*>(scales);
  char* const out = static_cast<char*>(to);
  const int64_t out_bytes = ElementBits(to_dtype) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols;) {
      const int64_t end = tile == 0 ? cols : std::min(cols, ((col0 + c) / tile + 1) * tile - col0);
      const int64_t s = BoxTileIndex(row0, col0, tile, grid_cols, r, c);
      const float scale = scale_dtype == DType::kFloat8E8M0FNU
                              ? Load<DType::kFloat8E8M0FNU>(s_in, s)
                              : Load<DType::kFloat32>(s_in, s);
      DequantizeFloats(in + r * row_stride + c, fp8, out + (r * cols + c) * out_bytes, to_dtype,
                       scale, end - c);
      c = end;
    }
  }
  return true;
}

}  // namespace sdrt::internal
