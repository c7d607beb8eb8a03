// The safetensors JSON header. Parsing is one SAX pass over at most 100 MB (HeaderReader)
// that checks the syntax, duplicate keys, depth and trailing characters and builds each
// top-level member's value, in the order of the text; the members are then checked rule
// by rule. The cost is O(n log n) in the tensors (sorting the ranges), no longer quadratic
// (nlohmann::ordered_json's linear key lookup made it so).
// Serialisation writes the compact form the reference writer (serde_json) produces, one key
// at a time, so the cost is linear in the tensors.
#include "sdrt/core/io/internal/safetensors_header.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

using Json = nlohmann::json;  // std::map objects; HeaderReader keeps the root's key order

// Deepest nesting safetensors 0.8.0 loads (serde_json's recursion limit of 128 counts the
// root): an unknown field of a tensor entry may hold 125 nested arrays, not 126.
constexpr int kMaxHeaderDepth = 127;

// JSON's insignificant whitespace (RFC 8259), also the header's padding.
constexpr absl::string_view kJsonWhitespace = " \t\n\r";

// One SAX pass over the header: checks the syntax, duplicate keys at every level (which
// a JSON DOM would silently collapse), the depth and trailing characters, and builds the
// root object's members as (key, value) in the order of the text. Stops at the first
// problem, recorded in error_ (or trailing_). Each value is an ordinary DOM (std::map
// objects); the root itself is never a map, so nothing costs more than O(log n) per key.
class HeaderReader : public nlohmann::json_sax<Json> {
 public:
  using Member = std::pair<std::string, Json>;

  bool null() override { return Add(Json(nullptr)); }
  bool boolean(bool value) override { return Add(Json(value)); }
  bool number_integer(number_integer_t value) override { return Add(Json(value)); }
  bool number_unsigned(number_unsigned_t value) override { return Add(Json(value)); }
  bool number_float(number_float_t value, const string_t&) override { return Add(Json(value)); }
  bool string(string_t& value) override { return Add(Json(std::move(value))); }
  bool binary(binary_t&) override { return false; }  // never produced by the JSON parser
  // The caller has checked that the text starts with '{' (after whitespace): depth 1 is
  // the root object, whose members go to members_ instead of a container.
  bool start_object(std::size_t) override {
    if (depth_ > 0) open_.push_back(Place(Json(Json::value_t::object)));
    return Enter();
  }
  bool key(string_t& key) override {
    if (depth_ == 1) {
      members_.emplace_back(std::move(key), Json());
      if (root_keys_.insert(members_.back().first).second) return true;
      return Duplicate(members_.back().first);
    }
    if (open_.back()->contains(key)) return Duplicate(key);
    key_ = std::move(key);
    return true;
  }
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override {
    open_.push_back(Place(Json(Json::value_t::array)));
    return Enter();
  }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& ex) override {
    trailing_ = root_closed_;  // the object parsed; the parser wanted the end of input
    error_ = absl::StrCat("invalid JSON: ", ex.what());
    return false;
  }

  const std::string& error() const { return error_; }
  bool trailing() const { return trailing_; }
  // The root object's members in the order of the text.
  const std::deque<Member>& members() const { return members_; }

 private:
  // Puts `value` where the parser is: the pending root member, the open array, or the
  // open object under the last key. Returns its address, stable until the container it
  // lives in grows, which happens only after it is closed.
  Json* Place(Json value) {
    if (open_.empty()) return &(members_.back().second = std::move(value));
    Json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
      return &parent.back();
    }
    return &(parent[key_] = std::move(value));
  }
  bool Add(Json value) {
    Place(std::move(value));
    return true;
  }
  bool Enter() {
    if (++depth_ <= kMaxHeaderDepth) return true;
    error_ = absl::StrCat("JSON nested deeper than ", kMaxHeaderDepth, " levels");
    return false;
  }
  bool Leave() {
    if (!open_.empty()) open_.pop_back();
    if (--depth_ == 0) root_closed_ = true;
    return true;
  }
  bool Duplicate(const std::string& key) {
    error_ = absl::StrCat("duplicate key \"", absl::Utf8SafeCHexEscape(key), "\"");
    return false;
  }

  int depth_ = 0;
  bool root_closed_ = false;
  bool trailing_ = false;
  std::deque<Member> members_;  // a deque: root_keys_ views its keys, which must not move
  absl::flat_hash_set<absl::string_view> root_keys_;
  std::vector<Json*> open_;  // the containers being filled below the root, innermost last
  std::string key_;          // the last key read in the innermost open object
  std::string error_;
};

// The offset of the first byte after the JSON object starting at `start`, a well-formed
// object as HeaderReader has checked (brackets inside strings do not count).
size_t ObjectEnd(absl::string_view json, size_t start) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = start; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return json.size();
}

// `value` as JSON text for a message, cut to 64 bytes (a bad value may be megabytes long).
std::string Snippet(const Json& value) {
  std::string text = value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  if (text.size() > 64) text = absl::StrCat(text.substr(0, 64), "...");
  return text;
}

absl::Status HeaderError(absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors header: ", message));
}

absl::Status TensorError(absl::string_view name, absl::string_view message) {
  return HeaderError(absl::StrCat("tensor \"", absl::Utf8SafeCHexEscape(name), "\": ", message));
}

// A JSON integer in [0, INT64_MAX], or an error naming `what`.
absl::StatusOr<int64_t> NonNegativeInt(const Json& value, absl::string_view what) {
  if (value.is_number_unsigned()) {
    const uint64_t v = value.get<uint64_t>();
    if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(v);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " must be a non-negative 64-bit integer, got ", Snippet(value)));
}

// Fields other than dtype, shape and data_offsets are ignored, as the reference does.
absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Json& value,
                                       int64_t data_bytes) {
  if (name.find('\0') != std::string::npos) {
    // Valid JSON ("\u0000"), but every C caller would see the name cut there.
    return TensorError(name, "its name holds a NUL byte");
  }
  if (!value.is_object()) {
    return TensorError(name, absl::StrCat("entry must be an object, got ", value.type_name()));
  }
  const Json* fields[3];
  const char* const kFields[3] = {"dtype", "shape", "data_offsets"};
  for (int i = 0; i < 3; ++i) {
    auto it = value.find(kFields[i]);
    if (it == value.end()) return TensorError(name, absl::StrCat("missing \"", kFields[i], "\""));
    fields[i] = &*it;
  }
  SafetensorsEntry entry;
  entry.name = name;
  const Json& dtype = *fields[0];
  if (!dtype.is_string()) return TensorError(name, "dtype must be a string");
  const std::string& code = dtype.get_ref<const std::string&>();
  absl::StatusOr<DType> known = DTypeFromSafetensors(code);
  if (!known.ok()) {
    return TensorError(name, absl::StrCat("unknown dtype \"", absl::Utf8SafeCHexEscape(code),
                                          "\" (not a safetensors dtype)"));
  }
  entry.dtype = *known;

  const Json& shape = *fields[1];
  if (!shape.is_array()) return TensorError(name, "shape must be an array");
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StatusOr<int64_t> size = NonNegativeInt(shape[i], absl::StrCat("shape[", i, "]"));
    if (!size.ok()) return TensorError(name, size.status().message());
    entry.shape.push_back(*size);
  }
  // numel * bits, which must be a whole number of bytes (the reference's rule).
  absl::StatusOr<int64_t> numel = CheckedNumel(entry.shape);
  if (!numel.ok()) {
    return TensorError(
        name, absl::StrCat("byte size of shape ", ShapeToString(entry.shape), " overflows int64"));
  }
  absl::StatusOr<int64_t> bytes = BytesForElements(entry.dtype, *numel);
  if (!bytes.ok()) {
    return TensorError(name, absl::StrCat(code, ShapeToString(entry.shape), ": ",
                                          bytes.status().message()));
  }
  const int64_t nbytes = *bytes;

  const Json& offsets = *fields[2];
  if (!offsets.is_array() || offsets.size() != 2) {
    return TensorError(name, "data_offsets must be an array [begin, end]");
  }
  absl::StatusOr<int64_t> begin = NonNegativeInt(offsets[0], "data_offsets[0]");
  if (!begin.ok()) return TensorError(name, begin.status().message());
  absl::StatusOr<int64_t> end = NonNegativeInt(offsets[1], "data_offsets[1]");
  if (!end.ok()) return TensorError(name, end.status().message());
  if (*begin > *end || *end > data_bytes) {
    return TensorError(name, absl::StrCat("data_offsets [", *begin, ", ", *end,
                                          "] must satisfy 0 <= begin <= end <= ", data_bytes,
                                          " (the data region's size)"));
  }
  if (*end - *begin != nbytes) {
    return TensorError(
        name, absl::StrCat("data_offsets [", *begin, ", ", *end, "] span ", *end - *begin,
                           " bytes but ", code, ShapeToString(entry.shape), " needs ", nbytes));
  }
  entry.data_begin = *begin;
  entry.data_end = *end;
  return entry;
}

// null means no metadata, as in the reference.
absl::Status ParseMetadata(const Json& value, std::map<std::string, std::string>* metadata) {
  if (value.is_null()) return absl::OkStatus();
  if (!value.is_object()) {
    return HeaderError(
        absl::StrCat("\"__metadata__\" must be an object or null, got ", value.type_name()));
  }
  for (const auto& item : value.items()) {
    if (!item.value().is_string()) {
      return HeaderError(absl::StrCat("\"__metadata__\" key \"",
                                      absl::Utf8SafeCHexEscape(item.key()), "\" has a ",
                                      item.value().type_name(), " value (", Snippet(item.value()),
                                      "); metadata values must be strings"));
    }
    (*metadata)[item.key()] = item.value().get<std::string>();
  }
  return absl::OkStatus();
}

// The entries sorted by range must tile [0, data_bytes): each begins where the last ended.
absl::Status CheckTiling(const std::vector<SafetensorsEntry>& sorted, int64_t data_bytes) {
  int64_t covered = 0;
  const SafetensorsEntry* last = nullptr;  // the last entry with bytes
  for (const SafetensorsEntry& e : sorted) {
    if (e.data_begin < covered) {
      return TensorError(
          e.name, absl::StrCat("data_offsets [", e.data_begin, ", ", e.data_end,
                               "] overlap tensor \"", absl::Utf8SafeCHexEscape(last->name), "\" [",
                               last->data_begin, ", ", last->data_end, "]"));
    }
    if (e.data_begin > covered) {
      return TensorError(e.name, absl::StrCat("data_offsets [", e.data_begin, ", ", e.data_end,
                                              "] leave a hole: bytes [", covered, ", ",
                                              e.data_begin, ") belong to no tensor"));
    }
    if (e.data_end > e.data_begin) last = &e;
    covered = e.data_end;
  }
  if (covered != data_bytes) {
    return HeaderError(absl::StrCat("the data region has ", data_bytes,
                                    " bytes but the tensors cover only [0, ", covered, ")"));
  }
  return absl::OkStatus();
}

// `text` as a JSON string literal; the caller has checked it is valid UTF-8.
std::string Quote(const std::string& text) {
  return Json(text).dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

}  // namespace

absl::Status ValidateUtf8(absl::string_view text, absl::string_view what) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the
    // range of the second byte; later bytes are 0x80..0xBF.
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    bool ok = len != 0 && i + len <= n && s[i + 1] >= lo && s[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; ++k) ok = (s[i + k] & 0xC0) == 0x80;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " is not valid UTF-8 at byte ", i, " (0x", absl::Hex(c), ")"));
    }
    i += len;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseSafetensorsHeaderLength(absl::string_view prefix, int64_t file_size) {
  if (file_size < 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        "file has ", file_size, " bytes, fewer than the 8-byte header length of safetensors"));
  }
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t{static_cast<unsigned char>(prefix[i])} << (8 * i);
  const std::string first_bytes = absl::BytesToHexString(prefix.substr(0, 8));
  if (length > static_cast<uint64_t>(kSafetensorsMaxHeaderBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", length, " exceeds the cap of ", kSafetensorsMaxHeaderBytes,
                     " bytes (first 8 bytes 0x", first_bytes, "; not a safetensors file?)"));
  }
  if (static_cast<int64_t>(length) > file_size - 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("header length ", length, " runs past the end of the ", file_size,
                     "-byte file (first 8 bytes 0x", first_bytes, ")"));
  }
  return static_cast<int64_t>(length);
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json,
                                                         int64_t data_bytes) {
  SDRT_RETURN_IF_ERROR(ValidateUtf8(json, "safetensors header"));
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows.
  if (const size_t nul = json.find('\0'); nul != absl::string_view::npos) {
    return HeaderError(
        absl::StrCat("NUL byte at byte ", nul, " (a header is JSON text and padding spaces)"));
  }
  const size_t start = json.find_first_not_of(kJsonWhitespace);
  if (start == absl::string_view::npos) return HeaderError("must be a JSON object, found nothing");
  if (json[start] != '{') {
    return HeaderError(absl::StrCat("must be a JSON object, found '",
                                    absl::CHexEscape(json.substr(start, 1)), "'"));
  }
  HeaderReader reader;
  if (!Json::sax_parse(json.begin(), json.end(), &reader)) {
    if (!reader.trailing()) return HeaderError(reader.error());
    return HeaderError(
        absl::StrCat("trailing characters after the JSON object at byte ",
                     json.find_first_not_of(kJsonWhitespace, ObjectEnd(json, start))));
  }

  SafetensorsHeader header;
  header.entries.reserve(reader.members().size());
  for (const auto& [key, value] : reader.members()) {
    if (key == kSafetensorsMetadataKey) {
      SDRT_RETURN_IF_ERROR(ParseMetadata(value, &header.metadata));
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(SafetensorsEntry entry, ParseEntry(key, value, data_bytes));
    header.entries.push_back(std::move(entry));
  }
  std::stable_sort(header.entries.begin(), header.entries.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return std::make_pair(a.data_begin, a.data_end) <
                            std::make_pair(b.data_begin, b.data_end);
                   });
  SDRT_RETURN_IF_ERROR(CheckTiling(header.entries, data_bytes));
  return header;
}

absl::StatusOr<std::string> SerializeSafetensorsHeader(
    absl::Span<const SafetensorsEntry> entries,
    const std::map<std::string, std::string>& metadata) {
  std::vector<std::string> items;
  items.reserve(entries.size() + 1);
  if (!metadata.empty()) {
    std::vector<std::string> pairs;
    for (const auto& [key, value] : metadata) {
      for (const std::string* text : {&key, &value}) {
        SDRT_RETURN_IF_ERROR(ValidateUtf8(
            *text, absl::StrCat("metadata key \"", absl::CHexEscape(key), "\" or its value")));
      }
      pairs.push_back(absl::StrCat(Quote(key), ":", Quote(value)));
    }
    items.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(pairs, ","), "}"));
  }
  for (const SafetensorsEntry& e : entries) {
    SDRT_RETURN_IF_ERROR(
        ValidateUtf8(e.name, absl::StrCat("tensor name \"", absl::CHexEscape(e.name), "\"")));
    items.push_back(absl::StrCat(Quote(e.name), ":{\"dtype\":\"", SafetensorsCode(e.dtype),
                                 "\",\"shape\":[", absl::StrJoin(e.shape, ","),
                                 "],\"data_offsets\":[", e.data_begin, ",", e.data_end, "]}"));
  }
  std::string header = absl::StrCat("{", absl::StrJoin(items, ","), "}");
  header.resize((header.size() + 7) / 8 * 8, ' ');
  if (static_cast<int64_t>(header.size()) > kSafetensorsMaxHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the header would have ", header.size(), " bytes, past the readers' cap of ",
                     kSafetensorsMaxHeaderBytes, " (too many tensors or too much metadata)"));
  }
  return header;
}

}  // namespace sdrt::internal
