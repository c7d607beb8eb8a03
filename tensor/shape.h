// Shapes, strides and offsets: small vectors of int64 in ELEMENTS, PyTorch order (dim 0
// outermost), and the arithmetic every layer does on them. Header-only; needs no Tensor,
// so a device mesh or a placement list can use it alone.
#ifndef SDRT_TENSOR_SHAPE_H_
#define SDRT_TENSOR_SHAPE_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// Sizes, strides and offsets in elements. Six dims inline, more on the heap.
using IntVector = absl::InlinedVector<int64_t, 6>;
using IntSpan = absl::Span<const int64_t>;

// Appends "[3, 4]" to *out.
inline void AppendShape(std::string* out, IntSpan shape) {
  out->push_back('[');
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out->append(", ");
    absl::StrAppend(out, shape[i]);
  }
  out->push_back(']');
}

// "[3, 4]".
inline std::string ShapeToString(IntSpan shape) {
  std::string out;
  AppendShape(&out, shape);
  return out;
}

// Row-major strides of a contiguous tensor of `shape` (size-1 and size-0 dims get the
// stride they would have with size 1, as PyTorch does).
inline IntVector ContiguousStrides(IntSpan shape) {
  IntVector strides(shape.size());
  int64_t running = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = running;
    running *= shape[i] > 1 ? shape[i] : 1;
  }
  return strides;
}

// Product of `shape`; InvalidArgument on negative sizes or int64 overflow.
inline absl::StatusOr<int64_t> CheckedNumel(IntSpan shape) {
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), ": dim ", i, " has negative size"));
    }
    if (__builtin_mul_overflow(numel, shape[i], &numel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", ShapeToString(shape), ": element count overflows int64"));
    }
  }
  return numel;
}

}  // namespace sdrt

#endif  // SDRT_TENSOR_SHAPE_H_
