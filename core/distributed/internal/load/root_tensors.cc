#include "sdrt/core/distributed/internal/load/root_tensors.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/io/internal/safetensors_header.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr int kRoot = 0;

// What the root sends: one tag byte (kNoSource: no list), then for kList the data region's
// bytes (8, little endian) and the header; for kError the error's message.
constexpr char kNoSource = 'n';
constexpr char kList = 'l';
constexpr char kError = 'e';

// The root's message: `source`'s tensors when `send`.
std::string Encode(const CheckpointSource* source, bool send) {
  if (source == nullptr || !send) return std::string(1, kNoSource);
  std::vector<SafetensorsEntry> entries;
  entries.reserve(source->tensors().size());
  int64_t at = 0;
  for (const CheckpointSourceTensor& t : source->tensors()) {
    // A source's tensors were checked when it opened: their byte counts are whole and
    // sum without overflow (each file's data region holds them).
    entries.push_back({t.name, t.dtype, t.shape, at, at + t.nbytes});
    at += t.nbytes;
  }
  absl::StatusOr<std::string> header = SerializeSafetensorsHeader(entries, {});
  if (!header.ok()) {
    return absl::StrCat(std::string(1, kError),
                        "the checkpoint's tensor list cannot be sent: ", header.status().message());
  }
  std::string out(1, kList);
  PutU64(&out, static_cast<uint64_t>(at));
  out += *header;
  return out;
}

absl::StatusOr<std::optional<std::vector<SafetensorsTensorSpec>>> Decode(absl::string_view bytes) {
  auto malformed = [](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("LoadStateDict: rank 0 sent a malformed tensor list (", why, ")"));
  };
  if (bytes.empty()) return malformed("empty");
  if (bytes[0] == kNoSource && bytes.size() == 1) {
    return std::optional<std::vector<SafetensorsTensorSpec>>();
  }
  if (bytes[0] == kError) {
    return absl::InvalidArgumentError(absl::StrCat("LoadStateDict: ", bytes.substr(1)));
  }
  ByteReader reader(bytes.substr(1));
  uint64_t data_bytes = 0;
  if (bytes[0] != kList || !reader.Bounded(INT64_MAX, &data_bytes)) return malformed("no list");
  absl::StatusOr<SafetensorsHeader> header =
      ParseSafetensorsHeader(bytes.substr(1 + sizeof(uint64_t)), static_cast<int64_t>(data_bytes));
  if (!header.ok()) return malformed(header.status().message());
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(header->entries.size());
  for (SafetensorsEntry& e : header->entries) {
    specs.push_back({std::move(e.name), e.dtype, std::move(e.shape)});
  }
  return std::optional<std::vector<SafetensorsTensorSpec>>(std::move(specs));
}

}  // namespace

absl::StatusOr<std::optional<std::vector<SafetensorsTensorSpec>>> ShareRootTensors(
    Communicator& comm, const CheckpointSource* source, bool send) {
  std::string bytes;
  if (comm.rank() == kRoot) bytes = Encode(source, send);
  SDRT_RETURN_IF_ERROR(comm.BroadcastBytes(&bytes, kRoot));
  return Decode(bytes);
}

}  // namespace sdrt::internal
