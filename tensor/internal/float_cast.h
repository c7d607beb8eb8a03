// Conversions between float32 and sdrt's narrower float formats, on their bit patterns:
// bfloat16, float16 (IEEE binary16), float8_e4m3fn, float8_e5m2 and float8_e8m0fnu; and
// float64, through float32 as PyTorch converts it. Every conversion from float32 rounds to
// nearest, ties to even, as PyTorch's `Tensor.to(dtype)` does
// (tests/tensor/float_cast_golden_test.cc checks each against PyTorch's own results); what
// each format does with values it cannot hold is written at its function. Widening to
// float32 is exact (but from float64, which rounds). A NaN comes out as a NaN; its bits
// (sign, payload) are not a contract, PyTorch's own differ by format and CPU path. One set
// of conversions for the whole project: the reductions of 16-bit floats (which combine in
// float32), and the casts of the transfer engine (docs/PLAN.md, "Engine layouts"). Host and
// device code (SDRT_HD); no CUDA or absl dependencies.
// Not API: in namespace sdrt::internal.
#ifndef SDRT_TENSOR_INTERNAL_FLOAT_CAST_H_
#define SDRT_TENSOR_INTERNAL_FLOAT_CAST_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/dtype.h"

namespace sdrt::internal {

// `from`'s bits as a `To` of the same size (std::memcpy: no aliasing), host and device.
template <typename To, typename From>
SDRT_HD inline To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "BitCast between types of one size");
  To to;
  std::memcpy(&to, &from, sizeof(to));
  return to;
}

SDRT_HD inline uint32_t FloatBits(float f) { return BitCast<uint32_t>(f); }
SDRT_HD inline float FloatFromBits(uint32_t bits) { return BitCast<float>(bits); }
SDRT_HD inline uint64_t DoubleBits(double d) { return BitCast<uint64_t>(d); }
SDRT_HD inline double DoubleFromBits(uint64_t bits) { return BitCast<double>(bits); }

// The magnitude of the finite float32 `magnitude_bits` (sign cleared) rounded to nearest,
// ties to even, in a binary format of `mantissa_bits` stored mantissa bits and exponent
// bias `bias` whose biased exponent 0 holds subnormals: the code (biased exponent <<
// mantissa_bits | mantissa) of the result. A result past the format's largest finite
// value comes out as the next code up (the caller makes it infinity or NaN); a magnitude
// below half the smallest subnormal is 0. For formats narrower than float32 in both
// exponent and mantissa (float16, the float8s).
SDRT_HD inline uint32_t RoundToNarrowCode(uint32_t magnitude_bits, int mantissa_bits, int bias) {
  const int biased = static_cast<int>(magnitude_bits >> 23);
  // The value is significand * 2^(exponent - 23).
  const uint32_t significand =
      (magnitude_bits & 0x7fffffu) | (biased != 0 ? 0x800000u : 0u);
  const int exponent = biased != 0 ? biased - 127 : -126;
  int target = exponent + bias;  // the result's biased exponent, if normal
  int shift = 23 - mantissa_bits;
  if (target < 1) {  // a subnormal of the format: its unit is 2^(1 - bias - mantissa_bits)
    shift += 1 - target;
    target = 0;
  }
  if (shift > 24) return 0;  // below half the smallest subnormal
  uint32_t kept = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u) != 0)) ++kept;  // may carry into the exponent
  if (target == 0) return kept;  // a subnormal, or the smallest normal after a carry
  return (static_cast<uint32_t>(target) << mantissa_bits) + kept - (1u << mantissa_bits);
}

// A narrow format for ToNarrow: RoundToNarrowCode's two numbers, the codes (sign clear) of
// a NaN and of an infinity, the first code past the largest finite magnitude and what a
// magnitude rounding to it or past it becomes (infinity, or the largest finite value where
// the format saturates), and where the sign bit goes (float32's bit 31 shifted right).
struct NarrowFormat {
  int mantissa_bits;
  int bias;
  uint32_t nan;
  uint32_t infinity;
  uint32_t limit;
  uint32_t past_limit;
  int sign_shift;
};

// The code of `f` in `format`, rounded to nearest even.
SDRT_HD inline uint32_t ToNarrow(float f, const NarrowFormat& format) {
  const uint32_t bits = FloatBits(f);
  const uint32_t sign = (bits & 0x80000000u) >> format.sign_shift;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | format.nan;
  if (magnitude == 0x7f800000u) return sign | format.infinity;
  const uint32_t code = RoundToNarrowCode(magnitude, format.mantissa_bits, format.bias);
  return sign | (code >= format.limit ? format.past_limit : code);
}

// bfloat16: float32's exponent range, so every float32 rounds to a bfloat16 (a magnitude
// past the largest finite one to infinity); a NaN stays a NaN, sign and upper payload kept,
// made quiet.
SDRT_HD inline float BFloat16ToFloat(uint16_t h) {
  return FloatFromBits(static_cast<uint32_t>(h) << 16);
}
SDRT_HD inline uint16_t FloatToBFloat16(float f) {
  uint32_t bits = FloatBits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// float16: a magnitude of 65520 or more (past the largest finite 65504 by half a step) is
// infinity; NaN is the quiet NaN 0x7e00 with the sign kept.
SDRT_HD inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return FloatFromBits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return FloatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or a subnormal, mantissa * 2^-24: exact in float32.
  const float magnitude = static_cast<float>(mantissa) * FloatFromBits(0x33800000u);
  return sign != 0 ? -magnitude : magnitude;
}
SDRT_HD inline uint16_t FloatToFloat16(float f) {
  return static_cast<uint16_t>(ToNarrow(f, {10, 15, 0x7e00u, 0x7c00u, 0x7c00u, 0x7c00u, 16}));
}

// float8_e4m3fn: no infinities; 0x7f (and 0xff) is NaN, 448 the largest finite magnitude.
// Saturating, as PyTorch's cast is (2.15; checked by the golden test): a magnitude that
// rounds past 448 (more than 464; 464 itself is a tie and goes to 448) and an infinity
// become 448 with their sign; a NaN stays a NaN.
SDRT_HD inline float Float8E4M3FNToFloat(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return FloatFromBits(sign | 0x7fc00000u);
  if (exponent != 0) return FloatFromBits(sign | ((exponent + 120u) << 23) | (mantissa << 20));
  const float magnitude = static_cast<float>(mantissa) * FloatFromBits(0x3b000000u);  // 2^-9
  return sign != 0 ? -magnitude : magnitude;
}
SDRT_HD inline uint8_t FloatToFloat8E4M3FN(float f) {
  return static_cast<uint8_t>(ToNarrow(f, {3, 7, 0x7fu, 0x7eu, 0x7fu, 0x7eu, 24}));
}

// float8_e5m2: float16's exponent with two mantissa bits; 57344 the largest finite
// magnitude, a magnitude of 61440 or more is infinity; NaN is 0x7f with the sign kept.
SDRT_HD inline float Float8E5M2ToFloat(uint8_t code) {
  return Float16ToFloat(static_cast<uint16_t>(static_cast<uint16_t>(code) << 8));
}
SDRT_HD inline uint8_t FloatToFloat8E5M2(float f) {
  return static_cast<uint8_t>(ToNarrow(f, {2, 15, 0x7fu, 0x7cu, 0x7cu, 0x7cu, 24}));
}

// float8_e8m0fnu: an unsigned power of two, 2^(code - 127) for codes 0..254, and NaN
// (0xff). From float32 the sign is dropped and the magnitude rounded to nearest, ties to
// even, reading float32's exponent as the code and its mantissa as the part rounded off (so
// 1.5 * 2^e, a tie, goes to 2^(e+1) for a normal float32, whose hidden bit is odd); NaN and
// infinity, and a magnitude that rounds past 2^127, are NaN.
SDRT_HD inline float Float8E8M0FNUToFloat(uint8_t code) {
  if (code == 0xffu) return FloatFromBits(0x7fc00000u);
  if (code == 0) return FloatFromBits(0x00400000u);  // 2^-127, a float32 subnormal
  return FloatFromBits(static_cast<uint32_t>(code) << 23);
}
SDRT_HD inline uint8_t FloatToFloat8E8M0FNU(float f) {
  const uint32_t bits = FloatBits(f);
  uint32_t exponent = (bits >> 23) & 0xffu;
  if (exponent == 0xffu) return 0xffu;
  const uint32_t mantissa = bits & 0x7fffffu;
  const uint32_t half = 0x400000u;
  const uint32_t lowest = exponent != 0 ? 1u : 0u;  // the hidden bit: the code's last bit
  if (mantissa > half || (mantissa == half && lowest != 0)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// The element of float dtype D (CastKind kFloat) for code generic over the dtypes (the host
// loops of ConvertFloats and the CUDA kernel of cuda/kernels.h): Bits, the unsigned type of
// its bytes; Widen, its value in float32 (exact); Narrow, a float32 rounded to it by the
// functions above.
template <DType D>
struct FloatCodec;
template <>
struct FloatCodec<DType::kFloat32> {
  using Bits = uint32_t;
  SDRT_HD static float Widen(Bits b) { return FloatFromBits(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatBits(f); }
};
// float64 goes through float32 as PyTorch's conversions do (c10's 16-bit and 8-bit float
// types are made from a float): its Widen rounds to nearest even (the C++ conversion), so a
// narrowing rounds twice, as PyTorch's; its Narrow (from a float32) is exact.
template <>
struct FloatCodec<DType::kFloat64> {
  using Bits = uint64_t;
  SDRT_HD static float Widen(Bits b) { return static_cast<float>(DoubleFromBits(b)); }
  SDRT_HD static Bits Narrow(float f) { return DoubleBits(static_cast<double>(f)); }
};
template <>
struct FloatCodec<DType::kBFloat16> {
  using Bits = uint16_t;
  SDRT_HD static float Widen(Bits b) { return BFloat16ToFloat(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatToBFloat16(f); }
};
template <>
struct FloatCodec<DType::kFloat16> {
  using Bits = uint16_t;
  SDRT_HD static float Widen(Bits b) { return Float16ToFloat(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatToFloat16(f); }
};
template <>
struct FloatCodec<DType::kFloat8E4M3FN> {
  using Bits = uint8_t;
  SDRT_HD static float Widen(Bits b) { return Float8E4M3FNToFloat(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatToFloat8E4M3FN(f); }
};
template <>
struct FloatCodec<DType::kFloat8E5M2> {
  using Bits = uint8_t;
  SDRT_HD static float Widen(Bits b) { return Float8E5M2ToFloat(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatToFloat8E5M2(f); }
};
template <>
struct FloatCodec<DType::kFloat8E8M0FNU> {
  using Bits = uint8_t;
  SDRT_HD static float Widen(Bits b) { return Float8E8M0FNUToFloat(b); }
  SDRT_HD static Bits Narrow(float f) { return FloatToFloat8E8M0FNU(f); }
};

// One element of `From` converted to `To` through float32, as ConvertFloats converts it.
template <DType From, DType To>
SDRT_HD inline typename FloatCodec<To>::Bits ConvertFloat(typename FloatCodec<From>::Bits b) {
  return FloatCodec<To>::Narrow(FloatCodec<From>::Widen(b));
}

// Calls visit(std::integral_constant<DType, D>{}) for D = `dtype`, a dtype of CastKind
// kFloat, and returns what it returns; returns `otherwise` for any other dtype.
template <typename Result, typename Visit>
Result VisitFloatDType(DType dtype, Result otherwise, Visit&& visit) {
  switch (dtype) {
    case DType::kFloat32:
      return visit(std::integral_constant<DType, DType::kFloat32>{});
    case DType::kFloat64:
      return visit(std::integral_constant<DType, DType::kFloat64>{});
    case DType::kBFloat16:
      return visit(std::integral_constant<DType, DType::kBFloat16>{});
    case DType::kFloat16:
      return visit(std::integral_constant<DType, DType::kFloat16>{});
    case DType::kFloat8E4M3FN:
      return visit(std::integral_constant<DType, DType::kFloat8E4M3FN>{});
    case DType::kFloat8E5M2:
      return visit(std::integral_constant<DType, DType::kFloat8E5M2>{});
    case DType::kFloat8E8M0FNU:
      return visit(std::integral_constant<DType, DType::kFloat8E8M0FNU>{});
    default:
      return otherwise;
  }
}

// Converts `count` elements at `from` (of `from_dtype`) into `to` (of `to_dtype`), through
// float32 with the conversions above; both dtypes of CastKind kFloat (tensor/dtype.h), the
// same dtype copied as it is. Host memory; either side may sit at any address (elements
// are read and written as bytes); the two must not overlap. Returns false, writing
// nothing, for a dtype that is not kFloat.
bool ConvertFloats(const void* from, DType from_dtype, void* to, DType to_dtype, int64_t count);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_INTERNAL_FLOAT_CAST_H_
