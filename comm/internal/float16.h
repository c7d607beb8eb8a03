// Conversions between float32 and the two 16-bit float formats (IEEE binary16 "float16" and
// bfloat16), held as their bit patterns in uint16_t. Round to nearest even, as PyTorch's
// c10::Half and c10::BFloat16 do; NaN stays NaN, overflow goes to infinity. Used by the MPI
// backend's 16-bit reductions (which combine in float32) and by their tests.
#ifndef SDRT_COMM_INTERNAL_FLOAT16_H_
#define SDRT_COMM_INTERNAL_FLOAT16_H_

#include <cmath>
#include <cstdint>
#include <cstring>

namespace sdrt::internal {

inline uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float FloatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline float BFloat16ToFloat(uint16_t h) { return FloatFromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return FloatFromBits(sign | 0x7f800000u | (mantissa << 13));
  return FloatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t FloatToFloat16(float f) {
  uint32_t bits = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00u;             // NaN
  if (bits >= 0x477ff000u) return sign | 0x7c00u;            // >= 65520 rounds to infinity
  if (bits < 0x38800000u) {                                  // below 2^-14: subnormal (or zero)
    const float scaled = FloatFromBits(bits) * 16777216.0f;  // exact: times 2^24
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  bits += 0xfffu + ((bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((bits - 0x38000000u) >> 13);
}

}  // namespace sdrt::internal

#endif  // SDRT_COMM_INTERNAL_FLOAT16_H_
