#include "sdrt/tensor/internal/byte_layout.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

// Dims of size > 1 merged where every layout in `strides` allows it (dim i into i + 1
// when stride[i] == stride[i + 1] * size[i + 1] on each side).
struct Merged {
  IntVector sizes;
  std::vector<IntVector> strides;
};

Merged Merge(IntSpan shape, std::initializer_list<IntSpan> layouts) {
  Merged m;
  m.strides.resize(layouts.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !m.sizes.empty();
    size_t k = 0;
    for (IntSpan s : layouts) {
      if (merge && m.strides[k].back() != s[d] * shape[d]) merge = false;
      ++k;
    }
    k = 0;
    for (IntSpan s : layouts) {
      if (merge) {
        m.strides[k].back() = s[d];
      } else {
        m.strides[k].push_back(s[d]);
      }
      ++k;
    }
    if (merge) {
      m.sizes.back() *= shape[d];
    } else {
      m.sizes.push_back(shape[d]);
    }
  }
  return m;
}

// The rule of CheckByteAddressable on a merged layout; "" when it holds, else the cut.
std::string Cut(int bits, IntSpan sizes, IntSpan strides, int64_t offset) {
  if ((offset * bits) % 8 != 0) return absl::StrCat("it starts at element ", offset);
  if (sizes.empty()) return "";  // one element: whole bytes only if bits % 8 == 0
  const size_t last = sizes.size() - 1;
  if (strides[last] != 1) {
    return absl::StrCat("its innermost elements are ", strides[last], " apart, not adjacent");
  }
  if ((sizes[last] * bits) % 8 != 0) {
    return absl::StrCat("its contiguous runs hold ", sizes[last], " elements");
  }
  for (size_t d = 0; d < last; ++d) {
    if ((strides[d] * bits) % 8 != 0) {
      return absl::StrCat("its runs are ", strides[d], " elements apart");
    }
  }
  return "";
}

absl::Status CutError(absl::string_view op, DType dtype, IntSpan shape, IntSpan strides,
                      int64_t offset, const std::string& cut) {
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", DTypeName(dtype), ShapeToString(shape), " strides ", ShapeToString(strides),
      " offset ", offset, " cannot be addressed in whole bytes: ", cut, "; a ", ElementBits(dtype),
      "-bit element cannot be cut inside a byte"));
}

}  // namespace

absl::Status CheckByteAddressable(absl::string_view op, DType dtype, IntSpan shape, IntSpan strides,
                                  int64_t offset) {
  if (!IsSubByte(dtype)) return absl::OkStatus();
  for (int64_t s : shape) {
    if (s == 0) return absl::OkStatus();
  }
  const Merged m = Merge(shape, {strides});
  std::string cut = Cut(ElementBits(dtype), m.sizes, m.strides[0], offset);
  if (m.sizes.empty() && cut.empty()) cut = "it is a single element";
  if (cut.empty()) return absl::OkStatus();
  return CutError(op, dtype, shape, strides, offset, cut);
}

absl::StatusOr<ByteCopy> SubByteCopy(absl::string_view op, DType dtype, IntSpan shape,
                                     IntSpan dst_strides, int64_t dst_offset, IntSpan src_strides,
                                     int64_t src_offset) {
  const int bits = ElementBits(dtype);
  Merged m = Merge(shape, {dst_strides, src_strides});
  for (int side = 0; side < 2; ++side) {
    const int64_t offset = side == 0 ? dst_offset : src_offset;
    std::string cut = Cut(bits, m.sizes, m.strides[side], offset);
    if (m.sizes.empty() && cut.empty()) cut = "it is a single element";
    if (!cut.empty()) {
      return CutError(op, dtype, shape, side == 0 ? dst_strides : src_strides, offset,
                      absl::StrCat(side == 0 ? "the destination: " : "the source: ", cut));
    }
  }
  ByteCopy copy;
  copy.sizes = std::move(m.sizes);
  copy.sizes.back() = copy.sizes.back() * bits / 8;
  for (int side = 0; side < 2; ++side) {
    IntVector& out = side == 0 ? copy.dst_strides : copy.src_strides;
    out = std::move(m.strides[side]);
    for (size_t d = 0; d + 1 < out.size(); ++d) out[d] = out[d] * bits / 8;
  }
  return copy;
}

}  // namespace sdrt::internal
