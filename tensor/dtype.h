// DType: the element types sdrt moves, written once in an X-macro table.
//
// sdrt never does arithmetic on elements except for Partial reductions, so a dtype is
// a name, a safetensors code, an element size and a DLPack code. Everything else
// (lookups, parsing, printing) is generated from SDRT_DTYPE_TABLE.
#ifndef SDRT_TENSOR_DTYPE_H_
#define SDRT_TENSOR_DTYPE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdrt {

// X(Enum, name as PyTorch prints it, safetensors code, element size in bytes,
//   DLPack type code, DLPack bits).
// DLPack codes follow DLPack 1.1 (kDLInt=0, kDLUInt=1, kDLFloat=2, kDLBfloat=4,
// kDLBool=6, kDLFloat8_e4m3fn=10, kDLFloat8_e5m2=12); Debian ships dlpack.h 0.6, which
// lacks the last three names, so the numbers are written here.
#define SDRT_DTYPE_TABLE(X)                             \
  X(Bool, "bool", "BOOL", 1, 6, 8)                      \
  X(UInt8, "uint8", "U8", 1, 1, 8)                      \
  X(Int8, "int8", "I8", 1, 0, 8)                        \
  X(Int16, "int16", "I16", 2, 0, 16)                    \
  X(Int32, "int32", "I32", 4, 0, 32)                    \
  X(Int64, "int64", "I64", 8, 0, 64)                    \
  X(Float16, "float16", "F16", 2, 2, 16)                \
  X(BFloat16, "bfloat16", "BF16", 2, 4, 16)             \
  X(Float32, "float32", "F32", 4, 2, 32)                \
  X(Float64, "float64", "F64", 8, 2, 64)                \
  X(Float8E4M3FN, "float8_e4m3fn", "F8_E4M3", 1, 10, 8) \
  X(Float8E5M2, "float8_e5m2", "F8_E5M2", 1, 12, 8)

enum class DType : uint8_t {
#define SDRT_DTYPE_ENUM(e, name, st, size, dl_code, dl_bits) k##e,
  SDRT_DTYPE_TABLE(SDRT_DTYPE_ENUM)
#undef SDRT_DTYPE_ENUM
};

#define SDRT_DTYPE_COUNT(e, name, st, size, dl_code, dl_bits) +1
inline constexpr int kNumDTypes = 0 SDRT_DTYPE_TABLE(SDRT_DTYPE_COUNT);
#undef SDRT_DTYPE_COUNT

// Size of one element in bytes.
constexpr int64_t ElementSize(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_SIZE(e, name, st, size, dl_code, dl_bits) \
  case DType::k##e:                                          \
    return size;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_SIZE)
#undef SDRT_DTYPE_SIZE
  }
  return 0;
}

// The table's invariants: DLPack bits agree with the element size; sizes are powers of 2.
#define SDRT_DTYPE_CHECK(e, name, st, size, dl_code, dl_bits)                  \
  static_assert((dl_bits) == 8 * (size), "DLPack bits != 8 * size for " name); \
  static_assert((size) == 1 || (size) == 2 || (size) == 4 || (size) == 8,      \
                "element size must be 1, 2, 4 or 8 for " name);
SDRT_DTYPE_TABLE(SDRT_DTYPE_CHECK)
#undef SDRT_DTYPE_CHECK
static_assert(kNumDTypes == 12, "the dtype table lists the 12 dtypes of docs/PLAN.md");

// "float32", as PyTorch prints the dtype without the "torch." prefix.
absl::string_view DTypeName(DType dtype);
// "F32", the safetensors dtype code.
absl::string_view SafetensorsCode(DType dtype);
// Parses a PyTorch name ("bfloat16", also "torch.bfloat16"). InvalidArgument names it.
absl::StatusOr<DType> DTypeFromName(absl::string_view name);
// Parses a safetensors code ("BF16"). InvalidArgument names the unknown code.
absl::StatusOr<DType> DTypeFromSafetensors(absl::string_view code);

// DLPack description of a dtype (lanes are always 1).
struct DLPackType {
  uint8_t code;
  uint8_t bits;
};
DLPackType ToDLPackType(DType dtype);
// InvalidArgument for codes/bits sdrt has no dtype for, and for lanes != 1.
absl::StatusOr<DType> DTypeFromDLPack(uint8_t code, uint8_t bits, uint16_t lanes);

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTYPE_H_
