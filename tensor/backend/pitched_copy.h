// A strided copy between two devices as a few pitched (2-D) copies: cudaMemcpy2DAsync
// moves `height` rows of `width` bytes from rows `src_pitch` bytes apart to rows
// `dst_pitch` bytes apart, straight between pinned host memory and the device, without
// packing either side first. A block of a row-major tensor whose innermost dim is whole in
// both layouts (a Shard(1) piece of [R, C] read out of a staging buffer: R rows of C/n
// elements, C elements apart) is one such copy; a 3-D block is one per outer index.
//
// Host arithmetic only (no CUDA): Tensor::CopyFrom plans with it and hands each copy to
// the device backend (DeviceBackend::Memcpy2D); tests check the plan on any machine.
#ifndef SDRT_TENSOR_BACKEND_PITCHED_COPY_H_
#define SDRT_TENSOR_BACKEND_PITCHED_COPY_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace sdrt::internal {

// One pitched copy: rows [0, height) of `width` bytes, row r at dst_offset + r * dst_pitch
// and src_offset + r * src_pitch (byte offsets from the two base pointers).
struct PitchedCopy {
  int64_t dst_offset = 0;
  int64_t src_offset = 0;
  int64_t width = 0;  // bytes per row, > 0
  int64_t height = 0;  // rows, > 0
  int64_t dst_pitch = 0;  // bytes between rows, >= width (== width when height == 1)
  int64_t src_pitch = 0;
};

// The most pitched copies one tensor copy is split into; beyond it the caller packs the
// strided side instead (more small copies cost more in launches than the packing).
inline constexpr int64_t kMaxPitchedCopies = 1024;

// The largest pitch (bytes between rows) a pitched copy uses: CUDA's limit on the pitch
// of cudaMemcpy2D (cudaDevAttrMaxPitch is 2^31 - 1 on current devices).
inline constexpr int64_t kMaxPitchBytes = (int64_t{1} << 31) - 1;

// Splits the copy dst[i] = src[i] over `sizes` (strides in elements of `elem_size` bytes,
// row-major, non-negative) into pitched copies, in row-major order of the outer indices:
// size-1 dims are dropped and adjacent dims contiguous in both layouts are merged; the
// innermost dim left is the row when it has stride 1 on both sides (else a row is one
// element), the next dim the rows of each copy, and every further dim one copy per index.
// Returns false, with `out` cleared, when a pitch is below the width (overlapping or
// broadcast rows) or above kMaxPitchBytes, or the copy needs more than `max_copies` copies. An empty copy (some size 0) is true with no copies. Preconditions:
// equal lengths of the three spans, elem_size > 0, and every byte offset fits in int64
// (PrepareStridedCopy's validation).
bool PlanPitchedCopies(int64_t elem_size, absl::Span<const int64_t> sizes,
                       absl::Span<const int64_t> dst_strides,
                       absl::Span<const int64_t> src_strides, int64_t max_copies,
                       std::vector<PitchedCopy>& out);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_BACKEND_PITCHED_COPY_H_
