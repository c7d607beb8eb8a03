// The little binary codec of the messages ranks exchange about what they hold (the
// agreement, reshard descriptors): 64-bit little-endian words and length-prefixed byte
// strings, read back with every length checked against what arrived, since a peer's bytes
// are never trusted. Reading never throws and never allocates more than the input holds.
// Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_BYTE_CODEC_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_BYTE_CODEC_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

namespace sdrt::internal {

inline void PutU64(std::string* out, uint64_t value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

inline void PutString(std::string* out, absl::string_view s) {
  PutU64(out, s.size());
  out->append(s.data(), s.size());
}

// Reads what PutU64 and PutString wrote; false when the bytes run out.
class ByteReader {
 public:
  explicit ByteReader(absl::string_view bytes) : rest_(bytes) {}

  bool U64(uint64_t* value) {
    if (rest_.size() < sizeof(*value)) return false;
    std::memcpy(value, rest_.data(), sizeof(*value));
    rest_.remove_prefix(sizeof(*value));
    return true;
  }
  // A word that must be at most `max` (a count, a code): false otherwise.
  bool Bounded(uint64_t max, uint64_t* value) { return U64(value) && *value <= max; }
  bool String(std::string* s) {
    uint64_t n = 0;
    if (!U64(&n) || n > rest_.size()) return false;
    s->assign(rest_.data(), static_cast<size_t>(n));
    rest_.remove_prefix(static_cast<size_t>(n));
    return true;
  }
  // A string as a view of the input (no copy; valid while the input is).
  bool View(absl::string_view* s) {
    uint64_t n = 0;
    if (!U64(&n) || n > rest_.size()) return false;
    *s = rest_.substr(0, static_cast<size_t>(n));
    rest_.remove_prefix(static_cast<size_t>(n));
    return true;
  }
  size_t Remaining() const { return rest_.size(); }
  bool AtEnd() const { return rest_.empty(); }

 private:
  absl::string_view rest_;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BYTE_CODEC_H_
