// PlanPitchedCopies (pitched_copy.h): merge dims, then enumerate the outer indices.
#include "sdrt/tensor/backend/pitched_copy.h"

#include <cstddef>

#include "absl/container/inlined_vector.h"

namespace sdrt::internal {
namespace {

struct Dim {
  int64_t size;
  int64_t dst;  // strides in bytes
  int64_t src;
};

}  // namespace

bool PlanPitchedCopies(int64_t elem_size, absl::Span<const int64_t> sizes,
                       absl::Span<const int64_t> dst_strides,
                       absl::Span<const int64_t> src_strides, int64_t max_copies,
                       std::vector<PitchedCopy>& out) {
  out.clear();
  for (int64_t s : sizes) {
    if (s == 0) return true;
  }
  // Dims from innermost out, size-1 dims dropped, merged where contiguous in both.
  absl::InlinedVector<Dim, 8> dims;
  for (size_t k = sizes.size(); k-- > 0;) {
    if (sizes[k] == 1) continue;
    const Dim d{sizes[k], dst_strides[k] * elem_size, src_strides[k] * elem_size};
    if (!dims.empty()) {
      Dim& inner = dims.back();
      if (d.dst == inner.size * inner.dst && d.src == inner.size * inner.src) {
        inner.size *= d.size;
        continue;
      }
    }
    dims.push_back(d);
  }
  PitchedCopy copy;
  if (dims.empty()) {  // one element
    copy.width = elem_size;
    copy.height = 1;
    copy.dst_pitch = copy.src_pitch = elem_size;
    out.push_back(copy);
    return true;
  }
  // The rows: the innermost dim when it is contiguous on both sides, else single elements
  // (a [R, 1] column of a Shard(1) piece), the innermost dim then being the rows' dim.
  const bool whole_rows = dims[0].dst == elem_size && dims[0].src == elem_size;
  copy.width = whole_rows ? dims[0].size * elem_size : elem_size;
  copy.height = 1;
  copy.dst_pitch = copy.src_pitch = copy.width;
  size_t first_outer = whole_rows ? 1 : 0;
  if (dims.size() > first_outer) {
    const Dim rows = dims[first_outer];
    if (rows.dst < copy.width || rows.src < copy.width) return false;
    if (rows.dst > kMaxPitchBytes || rows.src > kMaxPitchBytes) return false;
    copy.height = rows.size;
    copy.dst_pitch = rows.dst;
    copy.src_pitch = rows.src;
    ++first_outer;
  }
  int64_t count = 1;
  for (size_t k = first_outer; k < dims.size(); ++k) {
    if (count > max_copies / dims[k].size) return false;
    count *= dims[k].size;
  }
  if (count > max_copies) return false;
  out.reserve(static_cast<size_t>(count));
  // An odometer over the outer dims, the innermost of them fastest.
  absl::InlinedVector<int64_t, 8> index(dims.size(), 0);
  for (int64_t c = 0; c < count; ++c) {
    out.push_back(copy);
    size_t k = first_outer;
    for (; k < dims.size(); ++k) {
      copy.dst_offset += dims[k].dst;
      copy.src_offset += dims[k].src;
      if (++index[k] < dims[k].size) break;
      copy.dst_offset -= dims[k].dst * dims[k].size;
      copy.src_offset -= dims[k].src * dims[k].size;
      index[k] = 0;
    }
  }
  return true;
}

}  // namespace sdrt::internal
