#include "sdrt/tensor/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sdrt {

absl::StatusOr<int64_t> BytesForElements(DType dtype, int64_t count) {
  const int bits = ElementBits(dtype);
  int64_t total = 0;
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative element count ", count, " of ", DTypeName(dtype)));
  }
  if (bits % 8 == 0) {
    if (__builtin_mul_overflow(count, bits / 8, &total)) {
      return absl::InvalidArgumentError(absl::StrCat(count, " elements of ", DTypeName(dtype),
                                                     ": the byte count overflows int64"));
    }
    return total;
  }
  if (__builtin_mul_overflow(count, bits, &total)) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " elements of ", DTypeName(dtype), ": the bit count overflows int64"));
  }
  if (total % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(count, " elements of ", DTypeName(dtype), " (",
                                                   bits, " bits each) are ", total,
                                                   " bits, not a whole number of bytes"));
  }
  return total / 8;
}

absl::StatusOr<int64_t> ElementsForBytes(DType dtype, int64_t bytes) {
  const int bits = ElementBits(dtype);
  int64_t total = 0;
  if (bytes < 0 || __builtin_mul_overflow(bytes, 8, &total) || total % bits != 0) {
    return absl::InvalidArgumentError(absl::StrCat(bytes, " bytes are not a whole number of ",
                                                   DTypeName(dtype), " elements (", bits,
                                                   " bits each)"));
  }
  return total / bits;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_NAME(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                         \
    return name;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_NAME)
#undef SDRT_DTYPE_NAME
  }
  return "invalid";
}

absl::string_view SafetensorsCode(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_ST(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                       \
    return st;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_ST)
#undef SDRT_DTYPE_ST
  }
  return "invalid";
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  absl::ConsumePrefix(&name, "torch.");
#define SDRT_DTYPE_PARSE(e, n, st, bits, dl_code, reduce, cast) \
  if (name == n) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE)
#undef SDRT_DTYPE_PARSE
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype name '", name, "'"));
}

absl::StatusOr<DType> DTypeFromSafetensors(absl::string_view code) {
#define SDRT_DTYPE_PARSE_ST(e, n, st, bits, dl_code, reduce, cast) \
  if (code == st) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE_ST)
#undef SDRT_DTYPE_PARSE_ST
  return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype '", code, "'"));
}

DLPackType ToDLPackType(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_DL(e, name, st, bits, dl_code, reduce, cast) \
  case DType::k##e:                                       \
    return DLPackType{dl_code, bits};
    SDRT_DTYPE_TABLE(SDRT_DTYPE_DL)
#undef SDRT_DTYPE_DL
  }
  return DLPackType{0, 0};
}

absl::StatusOr<DType> DTypeFromDLPack(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DLPack dtype with lanes=", lanes, " is not supported (need 1)"));
  }
#define SDRT_DTYPE_PARSE_DL(e, name, st, b, dl_code, reduce, cast) \
  if (code == dl_code && bits == b) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE_DL)
#undef SDRT_DTYPE_PARSE_DL
  return absl::InvalidArgumentError(
      absl::StrCat("DLPack dtype code=", code, " bits=", bits, " has no sdrt dtype"));
}

}  // namespace sdrt
