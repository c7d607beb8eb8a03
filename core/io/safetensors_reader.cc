// SafetensorsFile: map, validate, hand out tensors.
//
// The file is mapped PROT_READ and wrapped in one kMappedFile Storage whose release is
// munmap; every zero-copy tensor holds that storage, so the mapping lives as long as any
// of them. A tensor whose address is not a multiple of its element size (other writers may
// leave the data region unaligned: case-045) is copied instead, never reinterpreted through
// a misaligned pointer.
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/io/internal/open_regular_file.h"
#include "sdrt/core/io/internal/safetensors_header.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Adds `source` (the path, or "<buffer>") in front of a status message, keeping the code;
// the messages below it never name the path themselves.
absl::Status WithSource(const absl::Status& status, absl::string_view source) {
  return absl::Status(status.code(), absl::StrCat(source, ": ", status.message()));
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path, Options options) {
  if (options.pin_mapping && options.pin_chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": pin_chunk_bytes must be >= 1, got ", options.pin_chunk_bytes));
  }
  // Read-only (internal::OpenRegularFile: a FIFO or a device is refused without waiting for a
  // writer).
  absl::StatusOr<std::shared_ptr<Storage>> mapping = internal::MapRegularFile(path, false);
  if (!mapping.ok()) return WithSource(mapping.status(), path);
  SDRT_ASSIGN_OR_RETURN(SafetensorsFile file, Parse(*std::move(mapping), path));
  if (!options.pin_mapping) return file;
  HostRegistrationOptions registration;
  registration.device = options.pin_device;
  registration.chunk_bytes = options.pin_chunk_bytes;
  registration.unbroken_ranges = file.TensorByteRanges();
  // The mapping is PROT_READ: only a read-only registration can pin it.
  absl::Status pinned =
      PinStorage(*file.storage_, kHostRegisterReadOnly | kHostRegisterPortable, registration);
  if (pinned.ok()) return file;
  pinned = WithSource(pinned, absl::StrCat(path, ": pinning the mapping"));
  if (!options.pageable_fallback) return pinned;
  file.pin_status_ = std::move(pinned);
  return file;
}

std::vector<std::pair<int64_t, int64_t>> SafetensorsFile::TensorByteRanges() const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ranges.reserve(entries_.size());
  for (const SafetensorsEntry& e : entries_) {
    ranges.emplace_back(data_offset() + e.data_begin, e.data_end - e.data_begin);
  }
  return ranges;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::FromBuffer(std::shared_ptr<Storage> bytes) {
  if (bytes == nullptr || !bytes->device().is_cpu()) {
    return absl::InvalidArgumentError("SafetensorsFile::FromBuffer: needs a CPU storage");
  }
  return Parse(std::move(bytes), "<buffer>");
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<Storage> storage,
                                                       std::string source) {
  const char* bytes = static_cast<const char*>(storage->data());
  const int64_t size = storage->nbytes();
  absl::StatusOr<int64_t> header_size =
      internal::ParseSafetensorsHeaderLength(absl::string_view(bytes, size < 8 ? 0 : 8), size);
  if (!header_size.ok()) return WithSource(header_size.status(), source);
  absl::StatusOr<internal::SafetensorsHeader> header = internal::ParseSafetensorsHeader(
      absl::string_view(bytes + 8, *header_size), size - 8 - *header_size);
  if (!header.ok()) return WithSource(header.status(), source);

  SafetensorsFile file;
  file.storage_ = std::move(storage);
  file.source_ = std::move(source);
  file.header_size_ = *header_size;
  file.entries_ = std::move(header->entries);
  file.metadata_ = std::move(header->metadata);
  for (size_t i = 0; i < file.entries_.size(); ++i) file.index_[file.entries_[i].name] = i;
  return file;
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

absl::StatusOr<Tensor> SafetensorsFile::Get(absl::string_view name) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(source_, ": no tensor named \"", absl::Utf8SafeCHexEscape(name), "\""));
  }
  const int64_t alignment = ElementAlignment(entry->dtype);
  const int64_t offset = data_offset() + entry->data_begin;  // bytes from the file start
  const char* base = static_cast<const char*>(storage_->data());
  const bool aligned =
      offset % alignment == 0 && reinterpret_cast<uintptr_t>(base) % alignment == 0;
  if (entry->data_end > entry->data_begin && aligned) {
    return Tensor::AtByteOffset(storage_, offset, entry->dtype, entry->shape);
  }
  absl::StatusOr<Tensor> copy = Tensor::Empty(entry->shape, entry->dtype);
  if (!copy.ok()) return WithSource(copy.status(), absl::StrCat(source_, ": ", entry->name));
  if (copy->nbytes() > 0) std::memcpy(copy->data_ptr(), base + offset, copy->nbytes());
  return copy;
}

}  // namespace sdrt
