// PlanDeviceCopies and EnqueueDeviceCopies (device_copies.h).
#include "sdrt/core/distributed/internal/load/device_copies.h"

#include <cstdint>
#include <vector>

#include "sdrt/tensor/backend/pitched_copy.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {
namespace {

// Addresses compared as integers: the rows of one copy may span adjacent dests, and the
// source side lies in the staging buffer: differences of unrelated pointers are not
// defined.
int64_t Address(const uint8_t* p) { return static_cast<int64_t>(reinterpret_cast<uintptr_t>(p)); }

bool PitchFits(int64_t pitch, int64_t width) { return pitch >= width && pitch <= kMaxPitchBytes; }

// Whether the segment of `width` bytes from `src` to `dst` extends `c`: right after its one
// row on both sides (the row grows), as its second row (which sets the pitches) or as the
// next row at its pitches.
bool Extend(DeviceCopy& c, const uint8_t* src, const uint8_t* dst, int64_t width) {
  const int64_t src_delta = Address(src) - Address(c.src);
  const int64_t dst_delta = Address(dst) - Address(c.dst);
  if (c.height == 1 && src_delta == c.width && dst_delta == c.width) {
    c.width += width;
    c.src_pitch = c.width;
    c.dst_pitch = c.width;
    return true;
  }
  if (width != c.width) return false;
  if (c.height == 1) {
    if (!PitchFits(src_delta, width) || !PitchFits(dst_delta, width)) return false;
    c.src_pitch = src_delta;
    c.dst_pitch = dst_delta;
    c.height = 2;
    return true;
  }
  // The next row, at height * pitch on both sides (a product that overflows is no row).
  int64_t src_next = 0;
  int64_t dst_next = 0;
  if (__builtin_mul_overflow(c.height, c.src_pitch, &src_next) ||
      __builtin_mul_overflow(c.height, c.dst_pitch, &dst_next) || src_delta != src_next ||
      dst_delta != dst_next) {
    return false;
  }
  ++c.height;
  return true;
}

}  // namespace

void PlanDeviceCopies(const ReadPlan& plan, const std::vector<ReadDest>& dests, const Read& read,
                      const uint8_t* bytes, Device device, std::vector<DeviceCopy>& copies,
                      std::vector<size_t>& others) {
  IntVector begin;
  IntVector end;
  for (size_t i = read.first_segment; i < read.first_segment + read.segment_count; ++i) {
    const Segment& s = plan.segments[i];
    const ReadDest& rd = dests[s.tensor];
    const Tensor& dest = rd.target->dests[rd.dest];
    int64_t start = -1;
    if (dest.device() == device) {
      SegmentBox(s, rd.tensor->shape, begin, end);
      start = ContiguousDestByte(s, rd.tensor->dtype, dest, *rd.runs, begin, end);
    }
    if (start < 0) {
      others.push_back(i);
      continue;
    }
    uint8_t* const dst = static_cast<uint8_t*>(dest.data_ptr()) + start;
    const uint8_t* const src = bytes + (s.file_offset - read.offset);
    const Storage* const storage = dest.storage().get();
    if (!copies.empty() && copies.back().storage == storage &&
        Extend(copies.back(), src, dst, s.bytes)) {
      continue;
    }
    copies.push_back(DeviceCopy{storage, dst, src, s.bytes, 1, s.bytes, s.bytes});
  }
}

absl::Status EnqueueDeviceCopies(const std::vector<DeviceCopy>& copies, Device device,
                                 DeviceBackend& backend, StreamHandle stream) {
  for (const DeviceCopy& c : copies) {
    if (c.height == 1) {
      SDRT_RETURN_IF_ERROR(backend.Memcpy(c.dst, device, c.src, Device::CPU(), c.width, stream,
                                          /*non_blocking=*/true));
    } else {
      SDRT_RETURN_IF_ERROR(backend.Memcpy2D(c.dst, c.dst_pitch, device, c.src, c.src_pitch,
                                            Device::CPU(), c.width, c.height, stream,
                                            /*non_blocking=*/true));
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
