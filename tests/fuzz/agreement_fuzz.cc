// libFuzzer target: the bytes the cross-rank agreement exchanges
// (core/distributed/internal/agreement.h): DecodeAgreementMessage and DecodeSkeleton on a
// peer's bytes. What decodes is exactly one encoded value, so it must encode back to the
// same bytes.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  std::optional<sdrt::internal::AgreementMessage> message =
      sdrt::internal::DecodeAgreementMessage(bytes);
  if (message.has_value()) {
    SDRT_FUZZ_CHECK(sdrt::internal::EncodeAgreementMessage(*message) == bytes);
  }
  std::optional<sdrt::AgreementSkeleton> skeleton = sdrt::internal::DecodeSkeleton(bytes);
  if (skeleton.has_value()) {
    SDRT_FUZZ_CHECK(sdrt::internal::EncodeSkeleton(*skeleton) == bytes);
  }
  return 0;
}
