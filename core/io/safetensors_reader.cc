// SafetensorsFile: map, validate, hand out tensors.
//
// The file is mapped PROT_READ and wrapped in one kMappedFile Storage whose release is
// munmap; every zero-copy tensor holds that storage, so the mapping lives as long as any
// of them. A tensor whose address is not a multiple of its element size (other writers may
// leave the data region unaligned: case-045) is copied instead, never reinterpreted through
// a misaligned pointer.
//
// A header-only description (`sdrt make --header-only`) fails the ordinary rules, its data
// region being empty; only then, and only when its metadata has the marker, is the header
// checked again by the same rules against the data region it describes (the end of its
// last tensor), and the file refused as what it is, or opened with accept_header_only.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
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

// For a header `json` whose __metadata__ marks it header-only: the size of the data region
// it describes (the largest data_offsets end; ParseSafetensorsHeader then checks the rest).
// nullopt for anything else. Only called for a file whose data region is empty and whose
// header broke a rule; nlohmann parses and frees any depth without recursion.
std::optional<int64_t> DescribedDataBytes(absl::string_view json) {
  if (json.find(kSafetensorsHeaderOnlyKey) == absl::string_view::npos) return std::nullopt;
  const nlohmann::json root =
      nlohmann::json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (!root.is_object()) return std::nullopt;
  const auto metadata = root.find(std::string(kSafetensorsMetadataKey));
  if (metadata == root.end() || !metadata->is_object()) return std::nullopt;
  const auto marker = metadata->find(std::string(kSafetensorsHeaderOnlyKey));
  if (marker == metadata->end() || *marker != "true") return std::nullopt;
  int64_t end = 0;
  for (const auto& [key, entry] : root.items()) {
    if (key == kSafetensorsMetadataKey || !entry.is_object()) continue;
    const auto offsets = entry.find("data_offsets");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[1].is_number_unsigned()) {
      continue;  // refused by ParseSafetensorsHeader
    }
    const uint64_t e = (*offsets)[1].get<uint64_t>();
    if (e > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    end = std::max(end, static_cast<int64_t>(e));
  }
  return end;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path, Options options) {
  if (options.pin_mapping && options.pin_chunk_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": pin_chunk_bytes must be >= 1, got ", options.pin_chunk_bytes));
  }
  // Read-only (internal::OpenRegularFile: a FIFO or a device is refused without waiting for a
  // writer).
  internal::FileIdentity identity;
  absl::StatusOr<std::shared_ptr<Storage>> mapping =
      internal::MapRegularFile(path, false, &identity);
  if (!mapping.ok()) return WithSource(mapping.status(), path);
  SDRT_ASSIGN_OR_RETURN(SafetensorsFile file,
                        Parse(*std::move(mapping), path, options.accept_header_only));
  file.device_ = identity.device;
  file.inode_ = identity.inode;
  if (!options.pin_mapping || file.header_only_) return file;
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
  return Parse(std::move(bytes), "<buffer>", /*accept_header_only=*/false);
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Parse(std::shared_ptr<Storage> storage,
                                                       std::string source,
                                                       bool accept_header_only) {
  const char* bytes = static_cast<const char*>(storage->data());
  const int64_t size = storage->nbytes();
  absl::StatusOr<int64_t> header_size =
      internal::ParseSafetensorsHeaderLength(absl::string_view(bytes, size < 8 ? 0 : 8), size);
  if (!header_size.ok()) return WithSource(header_size.status(), source);
  const absl::string_view json(bytes + 8, *header_size);
  const int64_t data_bytes = size - 8 - *header_size;
  absl::StatusOr<internal::SafetensorsHeader> header =
      internal::ParseSafetensorsHeader(json, data_bytes);
  bool header_only = false;
  if (!header.ok() && data_bytes == 0) {
    const std::optional<int64_t> described = DescribedDataBytes(json);
    absl::StatusOr<internal::SafetensorsHeader> description =
        described.has_value() && *described > 0
            ? internal::ParseSafetensorsHeader(json, *described)
            : absl::StatusOr<internal::SafetensorsHeader>(header.status());
    if (description.ok() && !accept_header_only) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": a header-only description made by `sdrt make --header-only` (",
                       description->entries.size(), " tensors, ", *described,
                       " bytes of data described): it has no tensor bytes (a layout to list or "
                       "plan with, not to load)"));
    }
    if (description.ok()) {
      header = std::move(description);
      header_only = true;
    } else if (described.has_value() && *described > 0) {
      // Marked as a description, and broken as one: its own fault, not an empty data region.
      header = absl::Status(description.status().code(),
                            absl::StrCat("a header-only description (`sdrt make --header-only`) ",
                                         "that breaks a rule: ", description.status().message()));
    }
  }
  if (!header.ok()) return WithSource(header.status(), source);

  SafetensorsFile file;
  file.storage_ = std::move(storage);
  file.source_ = std::move(source);
  file.header_size_ = *header_size;
  file.header_only_ = header_only;
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
  if (header_only_) {
    return absl::InvalidArgumentError(absl::StrCat(
        source_, ": tensor \"", absl::Utf8SafeCHexEscape(name),
        "\": a header-only description made by `sdrt make --header-only` has no tensor bytes"));
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
