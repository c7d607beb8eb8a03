// Builders shared by the safetensors tests (safetensors_test.cc, safetensors_header_test.cc,
// and the command-line tests' hand-made hostile files): file images and parsing them from
// memory. Header-only; test code only.
#ifndef SDRT_TESTS_CORE_IO_SAFETENSORS_TEST_UTIL_H_
#define SDRT_TESTS_CORE_IO_SAFETENSORS_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::test {

// A file image: 8-byte little-endian length of `header`, `header`, `data`.
inline std::string Image(const std::string& header, const std::string& data = "") {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  return out + header + data;
}

// `image` parsed by SafetensorsFile::FromBuffer from a CPU storage holding a copy of it.
inline absl::StatusOr<SafetensorsFile> Parse(const std::string& image) {
  std::shared_ptr<Storage> bytes = *Storage::AllocateCpu(static_cast<int64_t>(image.size()));
  if (!image.empty()) std::memcpy(bytes->data(), image.data(), image.size());
  return SafetensorsFile::FromBuffer(bytes);
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_IO_SAFETENSORS_TEST_UTIL_H_
