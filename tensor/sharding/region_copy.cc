#include "sdrt/tensor/sharding/region_copy.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
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

namespace {

// One side of a copy as CopyRuns sees it: its shape and, on the host, its memory.
struct Side {
  IntSpan shape;
  IntSpan strides;
  char* data = nullptr;  // host memory (the host path), else unused
  std::string (*describe)(const void*) = nullptr;
  const void* what = nullptr;
  std::string Describe() const { return describe(what); }
};

std::string DescribeTensor(const void* t) { return static_cast<const Tensor*>(t)->ToString(); }
std::string DescribePacked(const void* shape) {
  return absl::StrCat("packed piece ", ShapeToString(*static_cast<const IntSpan*>(shape)));
}

// Every run is checked before anything is copied, so an error leaves both sides as they
// were, and a bad run is reported even when another dim owns nothing.
absl::Status CheckRuns(const Side& box, IntSpan origin, const Side& local, const ShardRuns& runs) {
  for (size_t d = 0; d < runs.size(); ++d) {
    for (const IndexRun& r : runs[d]) {
      const int64_t start = r.global - origin[d];
      if (r.length < 0 || start < 0 || start > box.shape[d] - r.length || r.local < 0 ||
          r.local > local.shape[d] - r.length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CopyRuns: run of global indices [", r.global, ", ", r.global + r.length,
            ") at local index ", r.local, " on dim ", d, " is outside the box ", box.Describe(),
            " at origin ", ShapeToString(origin), " or the local ", local.Describe()));
      }
    }
  }
  return absl::OkStatus();
}

// The odometer over one run per dim: `block(box_start, local_start, length)` per block.
template <typename Block>
absl::Status ForEachBlock(IntSpan origin, const ShardRuns& runs, Block block) {
  const size_t ndim = runs.size();
  absl::InlinedVector<size_t, 6> pick(ndim, 0);
  IntVector box_start(ndim), local_start(ndim), length(ndim);
  while (true) {
    for (size_t d = 0; d < ndim; ++d) {
      const IndexRun& r = runs[d][pick[d]];
      box_start[d] = r.global - origin[d];
      local_start[d] = r.local;
      length[d] = r.length;
    }
    SDRT_RETURN_IF_ERROR(block(box_start, local_start, length));
    size_t d = ndim;
    for (; d-- > 0;) {
      if (++pick[d] < runs[d].size()) break;
      pick[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return absl::OkStatus();
  }
}

// The host path: each block one host strided copy between raw pointers (a memcpy when both
// sides are dense), no tensor views made per block.
absl::Status HostCopyRuns(const Side& box, IntSpan origin, const Side& local, int64_t elem,
                          const ShardRuns& runs, bool to_local) {
  // The common piece, one block dense on both sides (a Shard(0) piece of contiguous
  // tensors): one memcpy, no odometer.
  const size_t ndim = runs.size();
  int64_t b = 0;
  int64_t l = 0;
  int64_t numel = 1;
  int64_t dense = 1;  // the stride a dense block has on the dim being looked at
  bool one_dense_block = true;
  for (size_t d = ndim; d-- > 0 && one_dense_block;) {
    if (runs[d].size() != 1) {
      one_dense_block = false;
      break;
    }
    const IndexRun& r = runs[d][0];
    b += (r.global - origin[d]) * box.strides[d];
    l += r.local * local.strides[d];
    if (r.length != 1 && (box.strides[d] != dense || local.strides[d] != dense)) {
      one_dense_block = false;
    }
    dense *= r.length;
    numel *= r.length;
  }
  if (one_dense_block) {
    char* const bp = box.data + elem * b;
    char* const lp = local.data + elem * l;
    if (numel > 0) {
      std::memcpy(to_local ? lp : bp, to_local ? bp : lp, static_cast<size_t>(numel * elem));
    }
    return absl::OkStatus();
  }
  return ForEachBlock(origin, runs, [&](IntSpan box_start, IntSpan local_start, IntSpan length) {
    int64_t b = 0;
    int64_t l = 0;
    for (size_t d = 0; d < length.size(); ++d) {
      b += box_start[d] * box.strides[d];
      l += local_start[d] * local.strides[d];
    }
    char* const bp = box.data + elem * b;
    char* const lp = local.data + elem * l;
    return to_local ? HostCopy(lp, bp, elem, length, local.strides, box.strides)
                    : HostCopy(bp, lp, elem, length, box.strides, local.strides);
  });
}

}  // namespace

int64_t ContiguousRangeOffset(IntSpan shape, const ShardRuns& runs, bool use_local) {
  if (runs.size() != shape.size()) return -1;
  int64_t offset = 0;
  bool inner = false;  // past the first dim of more than one index
  for (size_t d = 0; d < shape.size(); ++d) {
    if (runs[d].size() != 1) return -1;
    const IndexRun& r = runs[d][0];
    const int64_t start = use_local ? r.local : r.global;
    if (r.length <= 0 || (inner && (start != 0 || r.length != shape[d]))) return -1;
    if (r.length != 1) inner = true;
    offset = offset * shape[d] + start;
  }
  return offset;
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
  Side b{box.shape(), box.strides(), static_cast<char*>(box.data_ptr()), DescribeTensor, &box};
  Side l{local.shape(), local.strides(), static_cast<char*>(local.data_ptr()), DescribeTensor,
         &local};
  SDRT_RETURN_IF_ERROR(CheckRuns(b, origin, l, runs));
  if (RunsNumel(runs) == 0) return absl::OkStatus();
  // Host memory on both sides and whole-byte elements take the host path. Tensors sharing
  // a storage and a destination with a zero stride take the checked one (CopyFrom's
  // overlap rules), as does every other device.
  const Tensor& dst = to_local ? local : box;
  const bool host = box.device().is_cpu() && local.device().is_cpu() &&
                    !IsSubByte(box.dtype()) && box.storage() != local.storage() &&
                    std::none_of(dst.strides().begin(), dst.strides().end(),
                                 [](int64_t s) { return s == 0; });
  if (host) return HostCopyRuns(b, origin, l, ElementAlignment(box.dtype()), runs, to_local);
  return ForEachBlock(origin, runs, [&](IntSpan box_start, IntSpan local_start, IntSpan length) {
    SDRT_ASSIGN_OR_RETURN(Tensor bv, Block(box, box_start, length));
    SDRT_ASSIGN_OR_RETURN(Tensor lv, Block(local, local_start, length));
    return to_local ? lv.CopyFrom(bv, non_blocking, stream) : bv.CopyFrom(lv, non_blocking, stream);
  });
}

namespace {

// The checks of the packed overloads: a CPU tensor of whole-byte elements, ranks that
// agree, and no zero stride in a tensor that is written.
absl::Status CheckPacked(const Tensor& t, IntSpan packed_shape, IntSpan origin,
                         const ShardRuns& runs, bool tensor_written) {
  const int ndim = t.dim();
  if (static_cast<int>(packed_shape.size()) != ndim || static_cast<int>(runs.size()) != ndim ||
      static_cast<int>(origin.size()) != ndim || !t.device().is_cpu() || IsSubByte(t.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CopyRuns: ", t.ToString(), " (a CPU tensor of whole-byte elements) and a ",
        packed_shape.size(), "-d packed block need the rank of the ", runs.size(),
        " dims of runs and the ", origin.size(), " of the origin"));
  }
  if (tensor_written &&
      std::any_of(t.strides().begin(), t.strides().end(), [](int64_t s) { return s == 0; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("CopyRuns: destination ", t.ToString(), " has a zero stride"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CopyRuns(const Tensor& box, IntSpan origin, const PackedBlock& local,
                      const ShardRuns& runs, bool to_local) {
  SDRT_RETURN_IF_ERROR(CheckPacked(box, local.shape, origin, runs, !to_local));
  const IntVector packed_strides = ContiguousStrides(local.shape);
  Side b{box.shape(), box.strides(), static_cast<char*>(box.data_ptr()), DescribeTensor, &box};
  Side l{local.shape, packed_strides, static_cast<char*>(local.data), DescribePacked,
         &local.shape};
  SDRT_RETURN_IF_ERROR(CheckRuns(b, origin, l, runs));
  if (RunsNumel(runs) == 0) return absl::OkStatus();
  return HostCopyRuns(b, origin, l, ElementAlignment(box.dtype()), runs, to_local);
}

absl::Status CopyRuns(const PackedBlock& box, IntSpan origin, const Tensor& local,
                      const ShardRuns& runs, bool to_local) {
  SDRT_RETURN_IF_ERROR(CheckPacked(local, box.shape, origin, runs, to_local));
  const IntVector packed_strides = ContiguousStrides(box.shape);
  Side b{box.shape, packed_strides, static_cast<char*>(box.data), DescribePacked, &box.shape};
  Side l{local.shape(), local.strides(), static_cast<char*>(local.data_ptr()), DescribeTensor,
         &local};
  SDRT_RETURN_IF_ERROR(CheckRuns(b, origin, l, runs));
  if (RunsNumel(runs) == 0) return absl::OkStatus();
  return HostCopyRuns(b, origin, l, ElementAlignment(local.dtype()), runs, to_local);
}

}  // namespace sdrt::internal
