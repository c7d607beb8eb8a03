// DType: the element types sdrt moves, written once in an X-macro table.
//
// sdrt never does arithmetic on elements except for Partial reductions, so a dtype is
// a name, a safetensors code, a width in bits and a DLPack code. Everything else
// (lookups, parsing, printing) is generated from SDRT_DTYPE_TABLE.
//
// Sub-byte dtypes (4- and 6-bit floats) are packed, as safetensors and DLPack 1.1 store
// them: element i of a contiguous run occupies bits [i * bits, (i + 1) * bits) of the run,
// counted from the least significant bit of its first byte. Shapes, strides and offsets
// count elements; a sub-byte tensor can be addressed only where its runs begin and end
// on byte boundaries (tensor/tensor.h). Every byte count goes through BytesForElements.
#ifndef SDRT_TENSOR_DTYPE_H_
#define SDRT_TENSOR_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// X(Enum, name as PyTorch prints it, safetensors code, bits per element, DLPack type code,
//   how a reduction combines it: a ReduceKind without its k, how a cast converts it: a
//   CastKind without its k).
// The safetensors codes and widths are those of the format's 0.8.0 `Dtype`. The DLPack
// bits are the element's bits and lanes are 1. DLPack codes follow DLPack 1.1's
// DLDataTypeCode (kDLInt=0, kDLUInt=1, kDLFloat=2, kDLBfloat=4, kDLComplex=5, kDLBool=6,
// kDLFloat8_e4m3fn=10, kDLFloat8_e4m3fnuz=11, kDLFloat8_e5m2=12, kDLFloat8_e5m2fnuz=13,
// kDLFloat8_e8m0fnu=14, kDLFloat6_e2m3fn=15, kDLFloat6_e3m2fn=16, kDLFloat4_e2m1fn=17);
// DLPack 1.1 has a code for every dtype here. Debian ships dlpack.h 0.6, which lacks the
// codes above 6, so the numbers are written here.
// Names: PyTorch's where it has the dtype. "F4" is PyTorch's float4_e2m1fn_x2, which
// PyTorch shapes in bytes (two elements each); sdrt's shape is the safetensors header's,
// in 4-bit elements, so its last dim is twice PyTorch's. PyTorch has no 6-bit float: the
// F6 names are those of ml_dtypes (float6_e2m3fn, float6_e3m2fn).
// The reduce column says which dtypes an all-reduce or a Partial placement combines, and
// as what arithmetic; the backends map it, with the width, to their own types once
// (comm/: MPI and NCCL datatypes). The others are moved, never combined.
// The cast column says which dtypes a transfer converts between (a destination of another
// dtype than its source): the float formats tensor/internal/float_cast.h converts through
// float32, exactly as PyTorch's `Tensor.to()`, float64 included: PyTorch too narrows a
// float64 to a 16-bit or 8-bit float through float32 (two roundings; widening is exact).
// New rows go at the end: the enum's values travel between ranks.
#define SDRT_DTYPE_TABLE(X)                                              \
  X(Bool, "bool", "BOOL", 8, 6, Bool, None)                              \
  X(UInt8, "uint8", "U8", 8, 1, Unsigned, None)                          \
  X(Int8, "int8", "I8", 8, 0, Signed, None)                              \
  X(Int16, "int16", "I16", 16, 0, Signed, None)                          \
  X(Int32, "int32", "I32", 32, 0, Signed, None)                          \
  X(Int64, "int64", "I64", 64, 0, Signed, None)                          \
  X(Float16, "float16", "F16", 16, 2, Float, Float)                      \
  X(BFloat16, "bfloat16", "BF16", 16, 4, BFloat, Float)                  \
  X(Float32, "float32", "F32", 32, 2, Float, Float)                      \
  X(Float64, "float64", "F64", 64, 2, Float, Float)                      \
  X(Float8E4M3FN, "float8_e4m3fn", "F8_E4M3", 8, 10, None, Float)        \
  X(Float8E5M2, "float8_e5m2", "F8_E5M2", 8, 12, None, Float)            \
  X(UInt16, "uint16", "U16", 16, 1, None, None)                          \
  X(UInt32, "uint32", "U32", 32, 1, None, None)                          \
  X(UInt64, "uint64", "U64", 64, 1, None, None)                          \
  X(Complex64, "complex64", "C64", 64, 5, None, None)                    \
  X(Float8E4M3FNUZ, "float8_e4m3fnuz", "F8_E4M3FNUZ", 8, 11, None, None) \
  X(Float8E5M2FNUZ, "float8_e5m2fnuz", "F8_E5M2FNUZ", 8, 13, None, None) \
  X(Float8E8M0FNU, "float8_e8m0fnu", "F8_E8M0", 8, 14, None, Float)      \
  X(Float6E2M3FN, "float6_e2m3fn", "F6_E2M3", 6, 15, None, None)         \
  X(Float6E3M2FN, "float6_e3m2fn", "F6_E3M2", 6, 16, None, None)         \
  X(Float4E2M1FNx2, "float4_e2m1fn_x2", "F4", 4, 17, None, None)

// How a reduction (an all-reduce, a Partial placement) combines the elements of a dtype:
// the table's reduce column.
enum class ReduceKind : uint8_t {
  kNone,      // moved, never combined: float8, unsigned integers above 8 bits, complex64,
              // the sub-byte floats
  kBool,      // 0 or 1: sum is logical or, product logical and; never averaged
  kSigned,    // a two's complement integer; avg truncates toward zero
  kUnsigned,  // an unsigned integer; avg truncates
  kFloat,     // an IEEE 754 binary16, binary32 or binary64
  kBFloat,    // bfloat16 (the upper half of a binary32)
};

// How a transfer may convert the elements of a dtype into another's: the table's last
// column.
enum class CastKind : uint8_t {
  kNone,   // never converted
  kFloat,  // to and from any other kFloat dtype, through float32
};

enum class DType : uint8_t {
#define SDRT_DTYPE_ENUM(e, name, st, bits, dl_code, reduce, cast) k##e,
  SDRT_DTYPE_TABLE(SDRT_DTYPE_ENUM)
#undef SDRT_DTYPE_ENUM
};

#define SDRT_DTYPE_COUNT(e, name, st, bits, dl_code, reduce, cast) +1
inline constexpr int kNumDTypes = 0 SDRT_DTYPE_TABLE(SDRT_DTYPE_COUNT);
#undef SDRT_DTYPE_COUNT

// Width of one element in bits: 4, 6, 8, 16, 32 or 64.
constexpr int ElementBits(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_BITS(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                         \
    return bits;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_BITS)
#undef SDRT_DTYPE_BITS
  }
  return 0;
}

// True for the packed dtypes narrower than a byte (F4, F6_E2M3, F6_E3M2).
constexpr bool IsSubByte(DType dtype) { return ElementBits(dtype) < 8; }

// The alignment in bytes that direct access to the dtype's data needs: the element's
// bytes, or 1 for sub-byte dtypes (they are only ever moved as bytes).
constexpr int64_t ElementAlignment(DType dtype) {
  return IsSubByte(dtype) ? 1 : ElementBits(dtype) / 8;
}

// How a reduction combines `dtype` (the table's reduce column).
constexpr ReduceKind ReduceKindOf(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_REDUCE(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                           \
    return ReduceKind::k##reduce;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_REDUCE)
#undef SDRT_DTYPE_REDUCE
  }
  return ReduceKind::kNone;
}

// How a transfer may convert `dtype` (the table's cast column).
constexpr CastKind CastKindOf(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_CAST(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                               \
    return CastKind::k##cast;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_CAST)
#undef SDRT_DTYPE_CAST
  }
  return CastKind::kNone;
}

// The table's invariants: widths are 4, 6 or a power-of-2 number of bytes.
#define SDRT_DTYPE_CHECK(e, name, st, bits, dl_code, reduce, cast)                              \
  static_assert(                                                                                 \
      (bits) == 4 || (bits) == 6 || (bits) == 8 || (bits) == 16 || (bits) == 32 || (bits) == 64, \
      "element width must be 4, 6, 8, 16, 32 or 64 bits for " name);
SDRT_DTYPE_TABLE(SDRT_DTYPE_CHECK)
#undef SDRT_DTYPE_CHECK
static_assert(kNumDTypes == 22, "the dtype table lists every dtype of safetensors 0.8.0");

// The bytes `count` consecutive elements of `dtype` occupy: count * bits / 8. The one
// place a byte count is derived from an element count. InvalidArgument when count is
// negative, when the product overflows int64, and, for sub-byte dtypes, when it is not a
// whole number of bytes (the message names the dtype, the count and the bits).
absl::StatusOr<int64_t> BytesForElements(DType dtype, int64_t count);

// The elements `bytes` bytes of `dtype` hold: bytes * 8 / bits. InvalidArgument when bytes
// is negative or the bytes do not hold a whole number of elements (a byte offset that
// falls inside an element).
absl::StatusOr<int64_t> ElementsForBytes(DType dtype, int64_t bytes);

// "float32", as PyTorch prints the dtype without the "torch." prefix.
absl::string_view DTypeName(DType dtype);
// "F32", the safetensors dtype code.
absl::string_view SafetensorsCode(DType dtype);
// Parses a PyTorch name ("bfloat16", also "torch.bfloat16"). InvalidArgument names it.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
// Parses a safetensors code ("BF16"). InvalidArgument names the unknown code.
absl::StatusOr<DType> DTypeFromSafetensors(absl::string_view code);

// DLPack description of a dtype (lanes are always 1; bits is ElementBits).
struct DLPackType {
  uint8_t code;
  uint8_t bits;
};
DLPackType ToDLPackType(DType dtype);
// InvalidArgument for codes/bits sdrt has no dtype for, and for lanes != 1.
absl::StatusOr<DType> DTypeFromDLPack(uint8_t code, uint8_t bits, uint16_t lanes);

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTYPE_H_
