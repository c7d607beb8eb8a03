// libFuzzer target: the safetensors header parser (core/io/internal/safetensors_header.h).
// The input is a whole file image: the 8-byte length prefix, the JSON header, the data
// region. A header that parses must serialise and parse back to the same entries and
// metadata.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "sdrt/core/io/internal/safetensors_header.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

namespace {

bool SameEntry(const sdrt::SafetensorsEntry& a, const sdrt::SafetensorsEntry& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape &&
         a.data_begin == b.data_begin && a.data_end == b.data_end;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view file(reinterpret_cast<const char*>(data), size);
  const auto file_size = static_cast<int64_t>(size);
  absl::StatusOr<int64_t> length = sdrt::internal::ParseSafetensorsHeaderLength(file, file_size);
  if (!length.ok()) return 0;
  SDRT_FUZZ_CHECK(*length >= 0 && *length <= file_size - 8);
  const int64_t data_bytes = file_size - 8 - *length;
  absl::StatusOr<sdrt::internal::SafetensorsHeader> header =
      sdrt::internal::ParseSafetensorsHeader(file.substr(8, *length), data_bytes);
  if (!header.ok()) return 0;

  int64_t covered = 0;
  for (const sdrt::SafetensorsEntry& entry : header->entries) {
    SDRT_FUZZ_CHECK(entry.data_begin == covered);  // the ranges tile the data region
    SDRT_FUZZ_CHECK(entry.data_end >= entry.data_begin && entry.data_end <= data_bytes);
    covered = entry.data_end;
  }
  SDRT_FUZZ_CHECK(covered == data_bytes);

  absl::StatusOr<std::string> text =
      sdrt::internal::SerializeSafetensorsHeader(header->entries, header->metadata);
  SDRT_FUZZ_CHECK(text.ok());
  SDRT_FUZZ_CHECK(text->size() % 8 == 0);
  absl::StatusOr<sdrt::internal::SafetensorsHeader> again =
      sdrt::internal::ParseSafetensorsHeader(*text, data_bytes);
  SDRT_FUZZ_CHECK(again.ok());
  SDRT_FUZZ_CHECK(again->metadata == header->metadata);
  SDRT_FUZZ_CHECK(again->entries.size() == header->entries.size());
  for (size_t i = 0; i < header->entries.size(); ++i) {
    SDRT_FUZZ_CHECK(SameEntry(again->entries[i], header->entries[i]));
  }
  return 0;
}
