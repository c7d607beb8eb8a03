// How HostRegistration splits a host range into cudaHostRegister calls: host arithmetic
// only, so it is built (and tested) with or without CUDA.
#ifndef SDRT_CUDA_REGISTRATION_CHUNKS_H_
#define SDRT_CUDA_REGISTRATION_CHUNKS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

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
// of 1 MiB and one of 0.5 MiB. Every chunk is non-empty; nbytes == 0 gives none.
// InvalidArgument for a negative nbytes, chunk_bytes < 1, a page size that is not a power
// of two, or a range whose end overflows the address space.
absl::StatusOr<std::vector<RegistrationChunk>> PlanRegistrationChunks(uint64_t address,
                                                                      int64_t nbytes,
                                                                      int64_t chunk_bytes,
                                                                      int64_t page_bytes);

}  // namespace sdrt::internal

#endif  // SDRT_CUDA_REGISTRATION_CHUNKS_H_
