// The reduce operations of an all-reduce and of a Partial placement: sum, avg, min, max,
// product, named as PyTorch names them ("sum", "avg", ...), and the dtypes they combine.
// Header-only.
#ifndef SDRT_TENSOR_REDUCE_OP_H_
#define SDRT_TENSOR_REDUCE_OP_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

enum class ReduceOp : uint8_t { kSum, kAvg, kMin, kMax, kProduct };

// "sum", "avg", "min", "max", "product".
inline absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "invalid";
}

// The op `name` names, with surrounding spaces and single quotes ignored ("'sum'", as
// PyTorch prints it inside a Partial); InvalidArgument for any other name.
inline absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  name = absl::StripAsciiWhitespace(name);
  absl::ConsumePrefix(&name, "'");
  absl::ConsumeSuffix(&name, "'");
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    if (name == ReduceOpName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown reduce op '", name, "'"));
}

// The dtypes a reduction combines (the dtype table's reduce column, ReduceKindOf): bool,
// uint8, the signed integers and the 16/32/64-bit floats. The others (float8, the unsigned
// integers above 8 bits, complex64 and the sub-byte floats) are moved, never combined.
constexpr bool IsReducible(DType dtype) { return ReduceKindOf(dtype) != ReduceKind::kNone; }

}  // namespace sdrt

#endif  // SDRT_TENSOR_REDUCE_OP_H_
