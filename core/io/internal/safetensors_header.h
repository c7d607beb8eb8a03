// The safetensors JSON header: parsing with validation, and serialisation. Shared by the
// reader (safetensors_reader.cc) and the writer (safetensors_writer.cc); not public API.
#ifndef SDRT_CORE_IO_INTERNAL_SAFETENSORS_HEADER_H_
#define SDRT_CORE_IO_INTERNAL_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::internal {

// A parsed, validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // sorted by (data_begin, data_end), stable
  std::map<std::string, std::string> metadata;
};

// OK when `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF); otherwise InvalidArgument naming `what` and the offending byte offset.
absl::Status ValidateUtf8(absl::string_view text, absl::string_view what);

// Reads the header length N from the first 8 bytes of a file of `file_size` bytes
// (`prefix` holds at least min(8, file_size) bytes). InvalidArgument, before anything is
// allocated, when the file is shorter than 8 bytes, N > kSafetensorsMaxHeaderBytes or
// N > file_size - 8.
absl::StatusOr<int64_t> ParseSafetensorsHeaderLength(absl::string_view prefix, int64_t file_size);

// Parses and validates the N header bytes `json` of a file whose data region holds
// `data_bytes` bytes: UTF-8 without NUL bytes, one JSON object (whitespace allowed before
// and after it, nothing else; nesting at most 127 deep) with no duplicate keys at any
// level, each entry an object with dtype, shape and data_offsets (other fields ignored),
// non-negative integer shape, 0 <= begin <= end <= data_bytes, numel * element size ==
// end - begin without overflow, ranges that tile [0, data_bytes) with no overlap or hole,
// and "__metadata__" null or an object of strings. InvalidArgument naming the tensor or key
// and the rule. A dtype safetensors defines but sdrt lacks (U16, F4, ...) is checked like
// the others (its size in bits) and reported only when the file is otherwise valid.
// O(n log n) in the number of tensors.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json,
                                                         int64_t data_bytes);

// The JSON header for `entries` (in this order, after "__metadata__" when `metadata` is not
// empty), padded with spaces to a multiple of 8 bytes, as the reference writer does.
// InvalidArgument naming the tensor or metadata key when a string is not valid UTF-8, and
// when the header would exceed kSafetensorsMaxHeaderBytes (no reader would open the file).
absl::StatusOr<std::string> SerializeSafetensorsHeader(
    absl::Span<const SafetensorsEntry> entries, const std::map<std::string, std::string>& metadata);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_IO_INTERNAL_SAFETENSORS_HEADER_H_
