// Byte addressing of sub-byte tensors (tensor/dtype.h): which views of packed 4- and 6-bit
// elements can be reached as whole bytes, and a copy between two such views restated as
// a copy of bytes. Private to tensor/ (Tensor's views and CopyFrom).
#ifndef SDRT_TENSOR_INTERNAL_BYTE_LAYOUT_H_
#define SDRT_TENSOR_INTERNAL_BYTE_LAYOUT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/shape.h"

namespace sdrt::internal {

// OK for every view of a whole-byte dtype and for views without elements. For a sub-byte
// dtype: dims of size 1 are dropped and adjacent dims merged where the strides allow;
// then the offset and every remaining stride but the innermost must be whole bytes, the
// innermost stride must be 1 and the innermost run a whole number of bytes. Otherwise
// InvalidArgument, prefixed with `op`, naming the dtype, the geometry and the cut.
absl::Status CheckByteAddressable(absl::string_view op, DType dtype, IntSpan shape, IntSpan strides,
                                  int64_t offset);

// A copy of equal shapes restated in bytes from the two first elements' bytes: sizes and
// strides per dim, the innermost dim counting bytes.
struct ByteCopy {
  IntVector sizes;
  IntVector dst_strides;
  IntVector src_strides;
};

// dst[i] = src[i] over `shape` for a sub-byte dtype, as a copy of bytes: dims of size 1
// dropped, dims merged where both sides allow, then CheckByteAddressable's rule on both
// sides (the offsets, in elements, are checked, not used). InvalidArgument (prefixed with `op`)
// when a side has a run that begins or ends inside a byte. Precondition: the copy has elements.
absl::StatusOr<ByteCopy> SubByteCopy(absl::string_view op, DType dtype, IntSpan shape,
                                     IntSpan dst_strides, int64_t dst_offset, IntSpan src_strides,
                                     int64_t src_offset);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_INTERNAL_BYTE_LAYOUT_H_
