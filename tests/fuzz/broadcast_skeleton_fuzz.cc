// libFuzzer target: the skeleton a broadcast root sends (DecodeBroadcastSkeleton,
// core/distributed/internal/broadcast_skeleton.h): a peer's bytes (binary words, inline
// values as CBOR), never trusted.
// Decoding returns entries or InvalidArgument; it never throws or crashes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sdrt/core/distributed/internal/broadcast_skeleton.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<sdrt::internal::SkeletonEntry>> entries =
      sdrt::internal::DecodeBroadcastSkeleton(bytes);
  if (!entries.ok()) {
    SDRT_FUZZ_CHECK(entries.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  for (const sdrt::internal::SkeletonEntry& entry : *entries) {
    if (!entry.is_tensor) continue;
    for (int64_t extent : entry.shape) SDRT_FUZZ_CHECK(extent >= 0);
  }
  return 0;
}
