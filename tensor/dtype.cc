#include "sdrt/tensor/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace sdrt {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_NAME(e, name, st, size, dl_code, dl_bits) \
  case DType::k##e:                                          \
    return name;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_NAME)
#undef SDRT_DTYPE_NAME
  }
  return "invalid";
}

absl::string_view SafetensorsCode(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_ST(e, name, st, size, dl_code, dl_bits) \
  case DType::k##e:                                        \
    return st;
    SDRT_DTYPE_TABLE(SDRT_DTYPE_ST)
#undef SDRT_DTYPE_ST
  }
  return "invalid";
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  absl::ConsumePrefix(&name, "torch.");
#define SDRT_DTYPE_PARSE(e, n, st, size, dl_code, dl_bits) \
  if (name == n) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE)
#undef SDRT_DTYPE_PARSE
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype name '", name, "'"));
}

absl::StatusOr<DType> DTypeFromSafetensors(absl::string_view code) {
#define SDRT_DTYPE_PARSE_ST(e, n, st, size, dl_code, dl_bits) \
  if (code == st) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE_ST)
#undef SDRT_DTYPE_PARSE_ST
  return absl::InvalidArgumentError(absl::StrCat("unknown safetensors dtype '", code, "'"));
}

DLPackType ToDLPackType(DType dtype) {
  switch (dtype) {
#define SDRT_DTYPE_DL(e, name, st, size, dl_code, dl_bits) \
  case DType::k##e:                                        \
    return DLPackType{dl_code, dl_bits};
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
#define SDRT_DTYPE_PARSE_DL(e, name, st, size, dl_code, dl_bits) \
  if (code == dl_code && bits == dl_bits) return DType::k##e;
  SDRT_DTYPE_TABLE(SDRT_DTYPE_PARSE_DL)
#undef SDRT_DTYPE_PARSE_DL
  return absl::InvalidArgumentError(
      absl::StrCat("DLPack dtype code=", code, " bits=", bits, " has no sdrt dtype"));
}

}  // namespace sdrt
