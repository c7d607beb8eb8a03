#include "sdrt/cuda/registration_chunks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {

absl::StatusOr<std::vector<RegistrationChunk>> PlanRegistrationChunks(
    uint64_t address, int64_t nbytes, int64_t chunk_bytes, int64_t page_bytes,
    absl::Span<const std::pair<int64_t, int64_t>> unbroken) {
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
  // The unbroken ranges as absolute [begin, end), sorted by begin, and the furthest end
  // among the first i + 1 of them.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  ranges.reserve(unbroken.size());
  for (const auto& [offset, length] : unbroken) {
    if (offset < 0 || length < 0 || offset > nbytes || length > nbytes - offset) {
      return absl::InvalidArgumentError(
          absl::StrCat("PlanRegistrationChunks: the range of ", length, " bytes at offset ",
                       offset, " is not inside the ", nbytes, " bytes registered"));
    }
    if (length > 0) ranges.emplace_back(address + offset, address + offset + length);
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<uint64_t> furthest(ranges.size());
  for (size_t i = 0; i < ranges.size(); ++i) {
    furthest[i] = std::max(ranges[i].second, i == 0 ? 0 : furthest[i - 1]);
  }
  std::vector<RegistrationChunk> chunks;
  uint64_t start = address;
  while (start < end) {
    // The last page boundary at or before start + step: past start, since step >= a page.
    uint64_t boundary = (start + step) & ~(page - 1);
    // Moved past every range that spans it (begins before it and ends after it), to the
    // page boundary after that range's end, until none does. Cannot overflow: range ends
    // are at most `end`, and end + step did not overflow.
    while (boundary < end) {
      const size_t before = static_cast<size_t>(
          std::lower_bound(ranges.begin(), ranges.end(), std::make_pair(boundary, uint64_t{0})) -
          ranges.begin());
      if (before == 0 || furthest[before - 1] <= boundary) break;
      boundary = (furthest[before - 1] + page - 1) & ~(page - 1);
    }
    const uint64_t stop = std::min(boundary, end);
    chunks.push_back(RegistrationChunk{static_cast<int64_t>(start - address),
                                       static_cast<int64_t>(stop - start)});
    start = stop;
  }
  return chunks;
}

}  // namespace sdrt::internal
