// The safetensors JSON header. Parsing runs in two passes over at most 100 MB: a SAX pass
// that reports syntax errors with their position, duplicate keys (which a JSON DOM would
// silently collapse) and nesting deeper than a header can have, then a DOM pass whose
// structure is checked rule by rule. Serialisation writes the compact form the reference
// writer (serde_json) produces, one key at a time, so the cost is linear in the tensors.
#include "core/internal/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace sdrt::internal {
namespace {

using Json = nlohmann::ordered_json;  // keeps the header's key order

// Deepest nesting a valid header has: root object > entry object > shape array.
constexpr int kMaxHeaderDepth = 3;

// SAX pass: syntax, duplicate keys, depth. Stops at the first problem, recorded in error_.
class HeaderScanner : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    keys_.emplace_back();
    return Enter();
  }
  bool key(string_t& key) override {
    if (keys_.back().insert(key).second) return true;
    error_ = absl::StrCat("duplicate key \"", absl::Utf8SafeCHexEscape(key), "\"");
    return false;
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    keys_.emplace_back();
    return Enter();
  }
  bool end_array() override { return end_object(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& ex) override {
    error_ = absl::StrCat("invalid JSON: ", ex.what());
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  bool Enter() {
    if (++depth_ <= kMaxHeaderDepth) return true;
    error_ = absl::StrCat("JSON nested deeper than ", kMaxHeaderDepth, " levels");
    return false;
  }

  int depth_ = 0;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open object
  std::string error_;
};

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

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Json& value,
                                            int64_t data_bytes) {
  if (!value.is_object()) {
    return TensorError(name, absl::StrCat("entry must be an object, got ", value.type_name()));
  }
  for (const auto& item : value.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      return TensorError(name,
                         absl::StrCat("unknown field \"", absl::Utf8SafeCHexEscape(item.key()),
                                      "\" (expected dtype, shape, data_offsets)"));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(field)) return TensorError(name, absl::StrCat("missing \"", field, "\""));
  }
  SafetensorsEntry entry;
  entry.name = name;
  const Json& dtype = value["dtype"];
  if (!dtype.is_string()) return TensorError(name, "dtype must be a string");
  const std::string& code = dtype.get_ref<const std::string&>();
  absl::StatusOr<DType> parsed = DTypeFromSafetensors(code);
  if (!parsed.ok()) {
    return TensorError(name,
                       absl::StrCat("unknown dtype \"", absl::Utf8SafeCHexEscape(code), "\""));
  }
  entry.dtype = *parsed;

  const Json& shape = value["shape"];
  if (!shape.is_array()) return TensorError(name, "shape must be an array");
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StatusOr<int64_t> size = NonNegativeInt(shape[i], absl::StrCat("shape[", i, "]"));
    if (!size.ok()) return TensorError(name, size.status().message());
    entry.shape.push_back(*size);
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(entry.shape);
  int64_t nbytes = 0;
  if (!numel.ok() || __builtin_mul_overflow(*numel, ElementSize(entry.dtype), &nbytes)) {
    return TensorError(
        name, absl::StrCat("byte size of shape ", ShapeToString(entry.shape), " overflows int64"));
  }

  const Json& offsets = value["data_offsets"];
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
        name,
        absl::StrCat("data_offsets [", *begin, ", ", *end, "] span ", *end - *begin, " bytes but ",
                     SafetensorsCode(entry.dtype), ShapeToString(entry.shape), " needs ", nbytes));
  }
  entry.data_begin = *begin;
  entry.data_end = *end;
  return entry;
}

absl::Status ParseMetadata(const Json& value, std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) {
    return HeaderError(absl::StrCat("\"__metadata__\" must be an object, got ", value.type_name()));
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
  if (absl::Status utf8 = ValidateUtf8(json, "safetensors header"); !utf8.ok()) return utf8;
  if (json.empty() || json.front() != '{') {
    return HeaderError("must start with '{' (a JSON object)");
  }
  HeaderScanner scanner;
  if (!Json::sax_parse(json.begin(), json.end(), &scanner)) return HeaderError(scanner.error());
  const Json doc = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return HeaderError("invalid JSON");

  SafetensorsHeader header;
  for (const auto& item : doc.items()) {
    if (item.key() == kSafetensorsMetadataKey) {
      if (absl::Status s = ParseMetadata(item.value(), &header.metadata); !s.ok()) return s;
      continue;
    }
    absl::StatusOr<SafetensorsEntry> entry = ParseEntry(item.key(), item.value(), data_bytes);
    if (!entry.ok()) return entry.status();
    header.entries.push_back(*std::move(entry));
  }
  std::stable_sort(header.entries.begin(), header.entries.end(),
                   [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
                     return std::make_pair(a.data_begin, a.data_end) <
                            std::make_pair(b.data_begin, b.data_end);
                   });
  if (absl::Status s = CheckTiling(header.entries, data_bytes); !s.ok()) return s;
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
        absl::Status s = ValidateUtf8(
            *text, absl::StrCat("metadata key \"", absl::CHexEscape(key), "\" or its value"));
        if (!s.ok()) return s;
      }
      pairs.push_back(absl::StrCat(Quote(key), ":", Quote(value)));
    }
    items.push_back(absl::StrCat("\"__metadata__\":{", absl::StrJoin(pairs, ","), "}"));
  }
  for (const SafetensorsEntry& e : entries) {
    absl::Status s =
        ValidateUtf8(e.name, absl::StrCat("tensor name \"", absl::CHexEscape(e.name), "\""));
    if (!s.ok()) return s;
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
