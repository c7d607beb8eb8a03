// libFuzzer target: what a peer sends about its leaves before a reshard
// (core/distributed/internal/engine/descriptors.h): DecodeLeafLayouts on its bytes, and
// MergeLeafLayouts over what decodes (alone, and twice as if two ranks sent it). Decoding
// normalizes (a Replicate's unused fields), so what decodes must encode to bytes that
// decode and encode to themselves.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<sdrt::internal::LeafLayout>> leaves =
      sdrt::internal::DecodeLeafLayouts(bytes, 1);
  if (!leaves.ok()) return 0;
  const std::string encoded = sdrt::internal::EncodeLeafLayouts(*leaves);
  absl::StatusOr<std::vector<sdrt::internal::LeafLayout>> again =
      sdrt::internal::DecodeLeafLayouts(encoded, 1);
  SDRT_FUZZ_CHECK(again.ok());
  SDRT_FUZZ_CHECK(sdrt::internal::EncodeLeafLayouts(*again) == encoded);
  (void)sdrt::internal::MergeLeafLayouts({*leaves});
  (void)sdrt::internal::MergeLeafLayouts({*leaves, *again});
  return 0;
}
