// ReadDest's helpers (read_dests.h).
#include "sdrt/core/distributed/internal/load/read_dests.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

// Where the box [begin, end) of segment `s` (which lies in `runs`, as every segment of
// the plan lies in its dest's runs) starts in `dest`, in bytes, when its elements are one
// contiguous range of `dest`: a contiguous CPU dest, one run per dim (Shard, Replicate, a
// ShardedTensor box) and, after the segment's dim, dims the box and the dest hold whole.
// -1 otherwise (also for a sub-byte start that is not a whole byte, and for a dest of
// another dtype than the file's `dtype`: a cast).
int64_t ContiguousDestByte(const Segment& s, DType dtype, const Tensor& dest,
                           const ShardRuns& runs, IntSpan begin, IntSpan end) {
  if (!dest.device().is_cpu() || !dest.is_contiguous() || dest.dtype() != dtype) return -1;
  int64_t start = 0;
  for (size_t d = 0; d < runs.size(); ++d) {
    if (runs[d].size() != 1) return -1;
    if (static_cast<int>(d) > s.dim && end[d] - begin[d] != dest.shape()[d]) return -1;
    start += (begin[d] - runs[d][0].global + runs[d][0].local) * dest.strides()[d];
  }
  const absl::StatusOr<int64_t> bytes = BytesForElements(dest.dtype(), start);
  return bytes.ok() ? *bytes : -1;
}

// Copies the segments of one read out of its staging buffer into their dests: one memcpy
// where the segment is a contiguous range of a CPU dest, else a strided CopyRuns; a dest of
// another float dtype than the file's gets the segment converted on the CPU from the staging
// bytes, straight into a dense range of a CPU dest (one pass), else into a box then copied. With
// `stream` (a device load), the copies are enqueued on it and the buffer must stay
// untouched until they have run.
absl::Status CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                     const Tensor& buffer, int64_t base, StreamHandle stream) {
  IntVector begin;
  IntVector end;
  IntVector box_shape;
  for (size_t i = read.first_segment; i < read.first_segment + read.segment_count; ++i) {
    const Segment& s = plan.segments[i];
    const ReadDest& rd = dests[s.tensor];
    const CheckpointSourceTensor& entry = *rd.tensor;
    SegmentBox(s, entry.shape, begin, end);
    const Tensor& dest = rd.target->dests[rd.dest];
    const bool cast = dest.dtype() != entry.dtype;
    const int64_t start = ContiguousDestByte(s, entry.dtype, dest, *rd.runs, begin, end);
    if (start >= 0) {
      std::memcpy(static_cast<uint8_t*>(dest.data_ptr()) + start,
                  buffer.data<uint8_t>() + base + (s.file_offset - read.offset),
                  static_cast<size_t>(s.bytes));
      continue;
    }
    box_shape.resize(begin.size());
    int64_t count = 1;
    for (size_t d = 0; d < begin.size(); ++d) {
      box_shape[d] = end[d] - begin[d];
      count *= box_shape[d];
    }
    const int64_t at = base + (s.file_offset - read.offset);
    Tensor box;
    if (cast) {
      // Converted (as Tensor.to() rounds) from the staging bytes (any address): straight into
      // a dense range of a CPU dest, else into a box of the dest's dtype copied as below.
      const int64_t into = ContiguousDestByte(s, dest.dtype(), dest, *rd.runs, begin, end);
      if (into < 0) {
        SDRT_ASSIGN_OR_RETURN(box, Tensor::Empty(box_shape, dest.dtype(), Device::CPU()));
      }
      void* const to = into >= 0 ? static_cast<uint8_t*>(dest.data_ptr()) + into : box.data_ptr();
      if (!ConvertFloats(buffer.data<uint8_t>() + at, entry.dtype, to, dest.dtype(), count)) {
        return absl::InternalError(absl::StrCat("'", entry.name, "': no cast from ",
                                                DTypeName(entry.dtype), " to ",
                                                DTypeName(dest.dtype())));
      }
      if (into >= 0) continue;
    } else if (at % ElementAlignment(entry.dtype) == 0) {
      SDRT_ASSIGN_OR_RETURN(box, Tensor::AtByteOffset(buffer.storage(),
                                                      buffer.storage_offset() + at, entry.dtype,
                                                      box_shape));
    } else {  // a tensor at an unaligned file offset: copy its bytes to aligned memory
      SDRT_ASSIGN_OR_RETURN(box, Tensor::Empty(box_shape, entry.dtype, Device::CPU()));
      std::memcpy(box.data<uint8_t>(), buffer.data<uint8_t>() + at, static_cast<size_t>(s.bytes));
    }
    const ShardRuns runs = ClipRuns(*rd.runs, begin, end);
    // A pageable box (the unaligned case, a cast) is copied out of before an asynchronous copy
    // from it returns, so it may go when this iteration ends.
    SDRT_RETURN_IF_ERROR(CopyRuns(box, begin, dest, runs, /*to_local=*/true,
                                  /*non_blocking=*/stream != nullptr, stream));
  }
  return absl::OkStatus();
}

// Lays out and allocates the fresh dests (meta until now: LocalTargetRules::allocate is
// false) in one arena, in the order of their first segment in the plan, so that a piece
// that follows another in its file follows it in memory (internal/fresh_arena.h).
absl::Status AllocateFreshDests(const ReadPlan& plan, std::vector<ReadDest>& dests, Device device) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  struct Chain {
    size_t first = kNone;  // its first segment
    size_t last = 0;
    int64_t begin = 0;
    int64_t end = 0;
    bool touching = true;  // its segments follow one another in the plan and in the file
  };
  std::vector<Chain> chains(dests.size());
  for (size_t i = 0; i < plan.segments.size(); ++i) {
    const Segment& s = plan.segments[i];
    Chain& c = chains[s.tensor];
    if (c.first == kNone) {
      c.first = i;
      c.begin = s.file_offset;
    } else if (c.last + 1 != i || s.file_offset != c.end) {
      c.touching = false;
    }
    c.last = i;
    c.end = s.file_offset + s.bytes;
  }
  std::vector<size_t> order;
  for (size_t t = 0; t < dests.size(); ++t) {
    if (dests[t].target->dests[dests[t].dest].is_meta()) order.push_back(t);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return chains[a].first < chains[b].first; });
  std::vector<FreshPiece> pieces(order.size());
  std::vector<Tensor*> fresh(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const ReadDest& rd = dests[order[i]];
    Tensor& dest = rd.target->dests[rd.dest];
    SDRT_ASSIGN_OR_RETURN(pieces[i].bytes, BytesForElements(dest.dtype(), dest.numel()));
    pieces[i].alignment = ElementAlignment(dest.dtype());
    const Chain& c = chains[order[i]];
    if (c.first != kNone && c.touching && c.end - c.begin == pieces[i].bytes) {
      pieces[i].file = rd.tensor->file;
      pieces[i].begin = c.begin;
      pieces[i].end = c.end;
    }
    fresh[i] = &dest;
  }
  SDRT_ASSIGN_OR_RETURN(const FreshLayout layout, LayOutFresh(pieces));
  return AllocateFresh(layout, device, fresh);
}

}  // namespace sdrt::internal
