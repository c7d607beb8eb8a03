// The copies of LoadStateDict's reads (internal/load/read_plan.h) out of a staging buffer
// into local tensors on a device, made few and large. A Read holds one segment per
// contiguous byte run of the file, and a Shard(1) piece of [R, C] is R segments, one per
// row, each its own Read (the gap to the next row is another rank's: never read through);
// the staged reader puts consecutive reads into one buffer. Copying each segment with its
// own cudaMemcpyAsync costs a launch per row (about 260,000 per rank for llama-8B at tp 8).
// Here the segments of the reads of one buffer that are each one contiguous byte range of
// their dest in the file's dtype become:
//   * one 1-D copy for segments that follow one another both in the staging buffer and in
//     device memory (whole tensors back to back in the load's fresh arena; the rows of a
//     Shard(1) piece, which the reader packs in the buffer, into a contiguous local);
//   * one 2-D copy (DeviceBackend::Memcpy2D, cudaMemcpy2DAsync) for rows of one width at a
//     constant pitch in the buffer and a constant pitch in device memory (rows whose bytes
//     the reader did not pack, a local whose rows are apart), pitches at most kMaxPitchBytes
//     (tensor/backend/pitched_copy.h).
// Everything is in bytes, so a segment at any file offset (a bf16 tensor at an odd offset)
// is a byte copy from the pinned buffer: no alignment is needed and nothing is staged again
// in pageable memory. A cast, a dest on another device, and a segment that is not one
// contiguous range of its dest (a non-contiguous dest, several runs on a dim, a sub-byte box
// that starts inside a byte) are left to the caller (CopySegment's CopyRuns path). Pure host
// arithmetic; the enqueueing goes through the DeviceBackend. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_COPIES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_COPIES_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/load/read_dests.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

// `height` rows of `width` bytes: row r from src + r * src_pitch (host memory: a staging
// buffer) to dst + r * dst_pitch (device memory: one or several adjacent dests of one
// allocation, `storage`: a copy never spans two, which CUDA does not promise to allow).
struct DeviceCopy {
  const Storage* storage = nullptr;
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  int64_t width = 0;      // > 0, bytes per row
  int64_t height = 1;     // > 0, rows; 1 is a 1-D copy (pitches == width)
  int64_t src_pitch = 0;  // >= width, <= kMaxPitchBytes
  int64_t dst_pitch = 0;  // >= width, <= kMaxPitchBytes
};

// Plans the copies of `read`'s segments (into dests[segment.tensor]) whose dests are on
// `device`, the read's first byte (file offset read.offset) being at `bytes`: appended to
// `copies`, the first joined to copies.back() where it continues it in the same dest
// allocation (so the reads of one buffer, planned one after another into one vector, share
// copies; the load's fresh arena holds its new locals in one allocation). The segments no copy
// covers (a cast, another device, not one contiguous range of the dest) are appended to
// `others` (indices into plan.segments, in order). Each copy writes exactly the bytes its
// segments name.
void PlanDeviceCopies(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                      const uint8_t* bytes, Device device, std::vector<DeviceCopy>& copies,
                      std::vector<size_t>& others);

// Enqueues `copies` on `stream` with `backend` (Memcpy for one row, Memcpy2D for several,
// non-blocking) from the host (pinned memory, so that they are asynchronous) to `device`.
// The host bytes must stay unchanged until the stream has run them. The backend's first
// error.
absl::Status EnqueueDeviceCopies(const std::vector<DeviceCopy>& copies, Device device,
                                 DeviceBackend& backend, StreamHandle stream);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_COPIES_H_
