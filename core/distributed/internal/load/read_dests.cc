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

int64_t ContiguousDestByte(const Segment& s, DType dtype, const Tensor& dest,
                           const ShardRuns& runs, IntSpan begin, IntSpan end) {
  if (dest.dtype() != dtype || dest.is_meta()) return -1;
  int64_t start = 0;
  int64_t dense = 1;  // the box's elements in the dims after d, when they are dense in dest
  for (size_t d = runs.size(); d-- > 0;) {
    if (runs[d].size() != 1) return -1;
    const int64_t length = end[d] - begin[d];
    if (static_cast<int>(d) >= s.dim) {
      if (static_cast<int>(d) > s.dim && length != dest.shape()[d]) return -1;
      // A dim of one index adds nothing to the range; a longer one must follow the dims
      // after it (lengths are within dest's shape, so `dense` stays below its numel).
      if (length > 1 && dest.strides()[d] != dense) return -1;
      dense *= length;
    }
    start += (begin[d] - runs[d][0].global + runs[d][0].local) * dest.strides()[d];
  }
  const absl::StatusOr<int64_t> bytes = BytesForElements(dest.dtype(), start);
  return bytes.ok() ? *bytes : -1;
}

absl::Status CopySegment(const ReadPlan& plan, const std::vector<ReadDest>& dests,
                         const Read& read, size_t i, const Tensor& buffer, int64_t base,
                         StreamHandle stream) {
  IntVector begin;
  IntVector end;
  const Segment& s = plan.segments[i];
  const ReadDest& rd = dests[s.tensor];
  const CheckpointSourceTensor& entry = *rd.tensor;
  SegmentBox(s, entry.shape, begin, end);
  const Tensor& dest = rd.target->dests[rd.dest];
  const bool cpu = dest.device().is_cpu();
  const int64_t at = base + (s.file_offset - read.offset);
  const int64_t start = cpu ? ContiguousDestByte(s, entry.dtype, dest, *rd.runs, begin, end) : -1;
  if (start >= 0) {
    std::memcpy(static_cast<uint8_t*>(dest.data_ptr()) + start, buffer.data<uint8_t>() + at,
                static_cast<size_t>(s.bytes));
    return absl::OkStatus();
  }
  IntVector box_shape(begin.size());
  int64_t count = 1;
  for (size_t d = 0; d < begin.size(); ++d) {
    box_shape[d] = end[d] - begin[d];
    count *= box_shape[d];
  }
  Tensor box;
  if (dest.dtype() != entry.dtype) {
    // Converted (as Tensor.to() rounds) from the staging bytes (any address): straight into
    // a dense range of a CPU dest, else into a box of the dest's dtype copied as below.
    const int64_t into =
        cpu ? ContiguousDestByte(s, dest.dtype(), dest, *rd.runs, begin, end) : -1;
    if (into < 0) {
      SDRT_ASSIGN_OR_RETURN(box, Tensor::Empty(box_shape, dest.dtype(), Device::CPU()));
    }
    void* const to = into >= 0 ? static_cast<uint8_t*>(dest.data_ptr()) + into : box.data_ptr();
    if (!ConvertFloats(buffer.data<uint8_t>() + at, entry.dtype, to, dest.dtype(), count)) {
      return absl::InternalError(absl::StrCat("'", entry.name, "': no cast from ",
                                              DTypeName(entry.dtype), " to ",
                                              DTypeName(dest.dtype())));
    }
    if (into >= 0) return absl::OkStatus();
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
  // from it returns, so it may go when this call ends.
  return CopyRuns(box, begin, dest, runs, /*to_local=*/true, /*non_blocking=*/stream != nullptr,
                  stream);
}

absl::Status CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                     const Tensor& buffer, int64_t base) {
  for (size_t i = read.first_segment; i < read.first_segment + read.segment_count; ++i) {
    SDRT_RETURN_IF_ERROR(CopySegment(plan, dests, read, i, buffer, base, /*stream=*/nullptr));
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
