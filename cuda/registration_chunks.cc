#include "sdrt/cuda/registration_chunks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::StatusOr<std::vector<RegistrationChunk>> PlanRegistrationChunks(uint64_t address,
                                                                      int64_t nbytes,
                                                                      int64_t chunk_bytes,
                                                                      int64_t page_bytes) {
  if (nbytes < 0 || chunk_bytes < 1 || page_bytes < 1 || (page_bytes & (page_bytes - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PlanRegistrationChunks: need nbytes >= 0, chunk_bytes >= 1 and a power-of-two page "
        "size; got nbytes ",
        nbytes, ", chunk_bytes ", chunk_bytes, ", page size ", page_bytes));
  }
  const uint64_t page = static_cast<uint64_t>(page_bytes);
  // A whole number of pages, at least one (cannot overflow: chunk_bytes < 2^63).
  const uint64_t step = (static_cast<uint64_t>(chunk_bytes) + page - 1) / page * page;
  uint64_t end = 0;
  uint64_t last_reach = 0;
  if (__builtin_add_overflow(address, static_cast<uint64_t>(nbytes), &end) ||
      __builtin_add_overflow(end, step, &last_reach)) {
    return absl::InvalidArgumentError(absl::StrCat("PlanRegistrationChunks: the range of ", nbytes,
                                                   " bytes at 0x", absl::Hex(address),
                                                   " overflows the address space"));
  }
  std::vector<RegistrationChunk> chunks;
  uint64_t start = address;
  while (start < end) {
    // The last page boundary at or before start + step: past start, since step >= a page.
    const uint64_t boundary = (start + step) & ~(page - 1);
    const uint64_t stop = std::min(boundary, end);
    chunks.push_back(RegistrationChunk{static_cast<int64_t>(start - address),
                                       static_cast<int64_t>(stop - start)});
    start = stop;
  }
  return chunks;
}

}  // namespace sdrt::internal
