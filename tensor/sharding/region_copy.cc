#include "sdrt/tensor/sharding/region_copy.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

IndexRuns RunsOfList(const std::vector<int64_t>& list) {
  IndexRuns runs;
  for (int64_t i = 0; i < static_cast<int64_t>(list.size()); ++i) {
    if (!runs.empty() && runs.back().global + runs.back().length == list[i]) {
      ++runs.back().length;
    } else {
      runs.push_back({list[i], i, 1});
    }
  }
  return runs;
}

// Narrows `t` on every dim to [start[d], start[d] + length[d]).
absl::StatusOr<Tensor> Block(const Tensor& t, IntSpan start, IntSpan length) {
  Tensor view = t;
  for (int d = 0; d < t.dim(); ++d) {
    SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, start[d], length[d]));
  }
  return view;
}

// The element offset of index `start` in `t` (its storage offset included).
int64_t ElementOffset(const Tensor& t, IntSpan start) {
  int64_t at = 0;
  for (size_t d = 0; d < start.size(); ++d) at += start[d] * t.strides()[d];
  return at;
}

// True when a block of `sizes` with `strides` is one dense row-major range.
bool Dense(IntSpan sizes, IntSpan strides) {
  int64_t expected = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// One block between host pointers: a memcpy when both sides are dense, else the strided
// copy (which validates and coalesces).
absl::Status HostCopy(char* dst, const char* src, int64_t elem, IntSpan sizes,
                      IntSpan dst_strides, IntSpan src_strides) {
  if (Dense(sizes, dst_strides) && Dense(sizes, src_strides)) {
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    if (numel > 0) std::memcpy(dst, src, static_cast<size_t>(numel * elem));
    return absl::OkStatus();
  }
  return StridedCopyHost(dst, src, elem, sizes, dst_strides, src_strides);
}

}  // namespace

ShardRuns OwnedRuns(const LocalShardInfo& info) {
  ShardRuns runs(info.global_offset.size());
  for (size_t d = 0; d < runs.size(); ++d) {
    if (d < info.index_lists.size() && !info.index_lists[d].empty()) {
      runs[d] = RunsOfList(info.index_lists[d]);
    } else if (info.local_shape[d] > 0) {
      runs[d].push_back({info.global_offset[d], 0, info.local_shape[d]});
    }
  }
  return runs;
}

ShardRuns BoxRuns(IntSpan offsets, IntSpan sizes) {
  ShardRuns runs(offsets.size());
  for (size_t d = 0; d < offsets.size(); ++d) {
    if (sizes[d] > 0) runs[d].push_back({offsets[d], 0, sizes[d]});
  }
  return runs;
}

ShardRuns ClipRuns(const ShardRuns& runs, IntSpan begin, IntSpan end) {
  ShardRuns clipped(runs.size());
  for (size_t d = 0; d < runs.size(); ++d) {
    for (const IndexRun& r : runs[d]) {
      const int64_t lo = std::max(r.global, begin[d]);
      const int64_t hi = std::min(r.global + r.length, end[d]);
      if (lo < hi) clipped[d].push_back({lo, r.local + (lo - r.global), hi - lo});
    }
  }
  return clipped;
}

int64_t RunsNumel(const ShardRuns& runs) {
  int64_t n = 1;
  for (const IndexRuns& dim : runs) {
    int64_t sum = 0;
    for (const IndexRun& r : dim) sum += r.length;
    n *= sum;
  }
  return n;
}

absl::Status CopyRuns(const Tensor& box, IntSpan origin, const Tensor& local, const ShardRuns& runs,
                      bool to_local, bool non_blocking, StreamHandle stream) {
  const int ndim = box.dim();
  if (local.dim() != ndim || static_cast<int>(runs.size()) != ndim ||
      static_cast<int>(origin.size()) != ndim || local.dtype() != box.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyRuns: box ", box.ToString(), " and local ", local.ToString(),
                     " need the same dtype and rank as the ", runs.size(), " dims of runs and the ",
                     origin.size(), " of the origin"));
  }
  // Every run is checked before anything is copied, so an error leaves both tensors as
  // they were, and a bad run is reported even when another dim owns nothing.
  for (int d = 0; d < ndim; ++d) {
    for (const IndexRun& r : runs[d]) {
      const int64_t start = r.global - origin[d];
      if (r.length < 0 || start < 0 || start > box.size(d) - r.length || r.local < 0 ||
          r.local > local.size(d) - r.length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CopyRuns: run of global indices [", r.global, ", ", r.global + r.length,
            ") at local index ", r.local, " on dim ", d, " is outside the box ", box.ToString(),
            " at origin ", ShapeToString(origin), " or the local ", local.ToString()));
      }
    }
  }
  if (RunsNumel(runs) == 0) return absl::OkStatus();
  // Host memory on both sides and whole-byte elements: each block is one host strided copy
  // between raw pointers (a memcpy when both sides are contiguous), with no tensor views
  // made per block. Anything else goes through Tensor::CopyFrom on views.
  // Tensors sharing a storage and a destination with a zero stride take the checked path
  // (CopyFrom's overlap rules).
  const Tensor& dst = to_local ? local : box;
  const bool host = box.device().is_cpu() && local.device().is_cpu() &&
                    !IsSubByte(box.dtype()) && box.storage() != local.storage() &&
                    std::none_of(dst.strides().begin(), dst.strides().end(),
                                 [](int64_t s) { return s == 0; });
  const int64_t elem = ElementAlignment(box.dtype());
  // Odometer over one run per dim.
  absl::InlinedVector<size_t, 6> pick(static_cast<size_t>(ndim), 0);
  IntVector box_start(static_cast<size_t>(ndim)), local_start(static_cast<size_t>(ndim)),
      length(static_cast<size_t>(ndim));
  while (true) {
    for (int d = 0; d < ndim; ++d) {
      const IndexRun& r = runs[d][pick[d]];
      box_start[d] = r.global - origin[d];
      local_start[d] = r.local;
      length[d] = r.length;
    }
    if (host) {
      char* b = static_cast<char*>(box.data_ptr()) + elem * ElementOffset(box, box_start);
      char* l = static_cast<char*>(local.data_ptr()) + elem * ElementOffset(local, local_start);
      SDRT_RETURN_IF_ERROR(to_local ? HostCopy(l, b, elem, length, local.strides(), box.strides())
                                    : HostCopy(b, l, elem, length, box.strides(), local.strides()));
    } else {
      SDRT_ASSIGN_OR_RETURN(Tensor b, Block(box, box_start, length));
      SDRT_ASSIGN_OR_RETURN(Tensor l, Block(local, local_start, length));
      SDRT_RETURN_IF_ERROR(to_local ? l.CopyFrom(b, non_blocking, stream)
                                    : b.CopyFrom(l, non_blocking, stream));
    }
    int d = ndim - 1;
    for (; d >= 0; --d) {
      if (++pick[d] < runs[d].size()) break;
      pick[d] = 0;
    }
    if (d < 0) break;
  }
  return absl::OkStatus();
}

}  // namespace sdrt
