#include "sdrt/tensor/internal/float_cast.h"

#include <algorithm>
#include <cstring>

namespace sdrt::internal {
namespace {

// Elements converted per pass through a float32 block on the stack.
constexpr int64_t kBlock = 1024;

// `n` elements of `dtype` at `from` widened into `out`.
void Widen(const char* from, DType dtype, int64_t n, float* out) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(out, from, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16:
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, from + 2 * i, sizeof(h));
        out[i] = dtype == DType::kBFloat16 ? BFloat16ToFloat(h) : Float16ToFloat(h);
      }
      return;
    case DType::kFloat8E4M3FN:
      for (int64_t i = 0; i < n; ++i) out[i] = Float8E4M3FNToFloat(static_cast<uint8_t>(from[i]));
      return;
    case DType::kFloat8E5M2:
      for (int64_t i = 0; i < n; ++i) out[i] = Float8E5M2ToFloat(static_cast<uint8_t>(from[i]));
      return;
    case DType::kFloat8E8M0FNU:
      for (int64_t i = 0; i < n; ++i) out[i] = Float8E8M0FNUToFloat(static_cast<uint8_t>(from[i]));
      return;
    default:
      return;
  }
}

// `n` float32 values narrowed into elements of `dtype` at `to`.
void Narrow(const float* in, int64_t n, DType dtype, char* to) {
  switch (dtype) {
    case DType::kFloat32:
      std::memcpy(to, in, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::kBFloat16:
    case DType::kFloat16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = dtype == DType::kBFloat16 ? FloatToBFloat16(in[i]) : FloatToFloat16(in[i]);
        std::memcpy(to + 2 * i, &h, sizeof(h));
      }
      return;
    case DType::kFloat8E4M3FN:
      for (int64_t i = 0; i < n; ++i) to[i] = static_cast<char>(FloatToFloat8E4M3FN(in[i]));
      return;
    case DType::kFloat8E5M2:
      for (int64_t i = 0; i < n; ++i) to[i] = static_cast<char>(FloatToFloat8E5M2(in[i]));
      return;
    case DType::kFloat8E8M0FNU:
      for (int64_t i = 0; i < n; ++i) to[i] = static_cast<char>(FloatToFloat8E8M0FNU(in[i]));
      return;
    default:
      return;
  }
}

}  // namespace

bool ConvertFloats(const void* from, DType from_dtype, void* to, DType to_dtype, int64_t count) {
  if (CastKindOf(from_dtype) != CastKind::kFloat || CastKindOf(to_dtype) != CastKind::kFloat) {
    return false;
  }
  const char* in = static_cast<const char*>(from);
  char* out = static_cast<char*>(to);
  if (from_dtype == to_dtype) {
    std::memcpy(out, in, static_cast<size_t>(count) * (ElementBits(from_dtype) / 8));
    return true;
  }
  const int64_t in_bytes = ElementBits(from_dtype) / 8, out_bytes = ElementBits(to_dtype) / 8;
  float block[kBlock];
  for (int64_t done = 0; done < count; done += kBlock) {
    const int64_t n = std::min(kBlock, count - done);
    Widen(in + done * in_bytes, from_dtype, n, block);
    Narrow(block, n, to_dtype, out + done * out_bytes);
  }
  return true;
}

}  // namespace sdrt::internal
