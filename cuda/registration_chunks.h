// How HostRegistration splits a host range into cudaHostRegister calls: host arithmetic
// only, so it is built (and tested) with or without CUDA.
#ifndef SDRT_CUDA_REGISTRATION_CHUNKS_H_
#define SDRT_CUDA_REGISTRATION_CHUNKS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace sdrt::internal {

// One cudaHostRegister call: bytes [offset, offset + nbytes) of the range.
struct RegistrationChunk {
  int64_t offset = 0;
  int64_t nbytes = 0;
  bool operator==(const RegistrationChunk& other) const {
    return offset == other.offset && nbytes == other.nbytes;
  }
};

// Splits the `nbytes` bytes at host address `address` into consecutive chunks of at most
// `chunk_bytes` rounded up to a multiple of `page_bytes` (a power of two), each chunk but
// the last ending on a page boundary, so no page is registered by two chunks (the driver
// page-locks whole pages). A page-aligned range of 5.5 MiB in 1 MiB chunks is five chunks
// of 1 MiB and one of 0.5 MiB. No chunk boundary falls strictly inside one of `unbroken`
// ((offset, nbytes) pairs relative to `address`, any order, may overlap: the tensors of a
// file or an arena), because CUDA copies from registered memory only within one
// registration: a chunk grows past chunk_bytes to the first page boundary that no such
// range spans, so a range lies in one chunk. Every chunk is non-empty; nbytes == 0 gives
// none. InvalidArgument for a negative nbytes, chunk_bytes < 1, a page size that is not a
// power of two, a range whose end overflows the address space, or an unbroken range
// outside [0, nbytes].
absl::StatusOr<std::vector<RegistrationChunk>> PlanRegistrationChunks(
    uint64_t address, int64_t nbytes, int64_t chunk_bytes, int64_t page_bytes,
    absl::Span<const std::pair<int64_t, int64_t>> unbroken = {});

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_REGISTRATION_CHUNKS_H_
