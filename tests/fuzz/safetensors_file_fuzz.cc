// libFuzzer target: a whole safetensors file image through SafetensorsFile::FromBuffer
// (core/io/safetensors.h), then every tensor it lists read with Get. The image is copied
// into a buffer of exactly its size so that AddressSanitizer sees any read past its end.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(data, data + size);
  std::shared_ptr<sdrt::Storage> storage =
      sdrt::Storage::Borrow(bytes->data(), static_cast<int64_t>(bytes->size()),
                            sdrt::Device::CPU(), [bytes](void*) {});
  absl::StatusOr<sdrt::SafetensorsFile> file = sdrt::SafetensorsFile::FromBuffer(storage);
  if (!file.ok()) return 0;
  SDRT_FUZZ_CHECK(file->data_offset() <= file->file_size());
  for (const sdrt::SafetensorsEntry& entry : file->entries()) {
    SDRT_FUZZ_CHECK(file->Find(entry.name) != nullptr);
    absl::StatusOr<sdrt::Tensor> tensor = file->Get(entry.name);
    SDRT_FUZZ_CHECK(tensor.ok());
    SDRT_FUZZ_CHECK(tensor->nbytes() == entry.data_end - entry.data_begin);
    if (tensor->nbytes() > 0) {
      const auto* source = static_cast<const uint8_t*>(storage->data()) + file->data_offset() +
                           entry.data_begin;
      SDRT_FUZZ_CHECK(std::memcmp(tensor->data_ptr(), source, tensor->nbytes()) == 0);
    }
  }
  return 0;
}
