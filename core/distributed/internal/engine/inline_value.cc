#include "sdrt/core/distributed/internal/engine/inline_value.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

using json = nlohmann::json;

std::string ToBytes(const json& j) {
  const std::vector<uint8_t> cbor = json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

// Deeper than any skeleton nests (an entry's inline value sits at depth 4).
constexpr size_t kMaxCborDepth = 16;

// True when `bytes` are exactly one CBOR item with definite lengths, no tags, nested at
// most kMaxCborDepth deep, whose every length fits in the bytes left. nlohmann's parser
// reserves what a header claims and recurses once per level, so bytes from another rank
// must pass this before they reach it (iterative; reads nothing past the end).
bool IsBoundedCbor(absl::string_view bytes) {
  size_t at = 0;
  std::vector<uint64_t> pending = {1};  // items still to read at each open level
  while (!pending.empty()) {
    if (pending.back() == 0) {
      pending.pop_back();
      continue;
    }
    --pending.back();
    if (at >= bytes.size()) return false;
    const auto head = static_cast<uint8_t>(bytes[at++]);
    const int major = head >> 5;
    const int info = head & 31;
    uint64_t arg = static_cast<uint64_t>(info);
    if (info >= 24) {
      if (info > 27) return false;  // indefinite lengths and reserved values
      const size_t n = size_t{1} << (info - 24);
      if (bytes.size() - at < n) return false;
      arg = 0;
      for (size_t i = 0; i < n; ++i) arg = arg << 8 | static_cast<uint8_t>(bytes[at++]);
    }
    const uint64_t left = bytes.size() - at;
    switch (major) {
      case 2:  // byte string
      case 3:  // text string
        if (arg > left) return false;
        at += static_cast<size_t>(arg);
        break;
      case 4:  // array: every item takes a byte at least
      case 5:  // map: every key and value too
        if (arg > left / (major == 5 ? 2 : 1) || pending.size() > kMaxCborDepth) return false;
        pending.push_back(major == 5 ? 2 * arg : arg);
        break;
      case 6:  // tag
        return false;
      default:  // integers, simple values and floats: the argument was all
        break;
    }
  }
  return at == bytes.size();
}

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("inline value: ", what));
}

// The member `key` of the object `j`, or nullptr when `j` is not an object or lacks it.
const json* Field(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

// The string member `key` of `j` into `out`; false when absent or not a string.
bool StringField(const json& j, const char* key, std::string* out) {
  const json* f = Field(j, key);
  if (f == nullptr || !f->is_string()) return false;
  *out = f->get<std::string>();
  return true;
}

json Binary(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  return json::binary(std::vector<uint8_t>(p, p + n));
}

// The inline form of a non-tensor leaf or a 0-dim tensor; an error for what cannot travel.
absl::StatusOr<json> EncodeInline(absl::string_view path, const Value& v) {
  switch (v.kind()) {
    case ValueKind::kNone:
      return json{{"k", "none"}};
    case ValueKind::kBool:
      return json{{"k", "bool"}, {"v", v.as_bool()}};
    case ValueKind::kInt:
      return json{{"k", "int"}, {"v", v.as_int()}};
    case ValueKind::kDouble:
      return json{{"k", "float"}, {"v", v.as_double()}};
    case ValueKind::kString:
      return json{{"k", "str"}, {"v", Binary(v.as_string().data(), v.as_string().size())}};
    case ValueKind::kBytes:
      return json{{"k", "bytes"},
                  {"v", Binary(v.as_bytes().data.data(), v.as_bytes().data.size())}};
    case ValueKind::kTensor: {
      absl::StatusOr<Value> cpu = MoveToCpu(v);
      if (!cpu.ok()) {
        return absl::Status(cpu.status().code(),
                            absl::StrCat("'", path, "': ", cpu.status().message()));
      }
      const Tensor& t = cpu->as_tensor();
      return json{{"k", "scalar"},
                  {"d", std::string(DTypeName(t.dtype()))},
                  {"v", Binary(t.data_ptr(), static_cast<size_t>(t.nbytes()))}};
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "': a ", ValueKindName(v.kind()),
          " cannot be broadcast from a full state dict (plain tensors and Python scalars only)"));
  }
}

// Decodes what EncodeInline made, checking every member's type first (never throws).
absl::StatusOr<Value> DecodeInline(const json& j) {
  std::string k;
  if (!StringField(j, "k", &k)) return Malformed("an inline value without a kind");
  if (k == "none") return Value(None{});
  const json* v = Field(j, "v");
  if (v == nullptr) return Malformed(absl::StrCat("an inline ", k, " without a value"));
  if (k == "bool" && v->is_boolean()) return Value(v->get<bool>());
  if (k == "int" && v->is_number_integer()) return Value(v->get<int64_t>());
  if (k == "float" && v->is_number()) return Value(v->get<double>());
  if (!v->is_binary()) return Malformed(absl::StrCat("an inline ", k, " of the wrong type"));
  const std::vector<uint8_t>& bin = v->get_binary();
  const std::string bytes(bin.begin(), bin.end());
  if (k == "str") return Value(bytes);
  if (k == "bytes") return Value(Bytes{bytes});
  std::string dtype_name;
  if (k != "scalar" || !StringField(j, "d", &dtype_name)) {
    return Malformed(absl::StrCat("unknown inline kind ", k));
  }
  absl::StatusOr<DType> dtype = DTypeFromName(dtype_name);
  if (!dtype.ok()) return Malformed(dtype.status().message());
  absl::StatusOr<Tensor> t = Tensor::Empty({}, *dtype);
  if (!t.ok()) return t.status();
  if (static_cast<int64_t>(bytes.size()) != t->nbytes()) {
    return Malformed("scalar of the wrong size");
  }
  std::memcpy(t->data_ptr(), bytes.data(), bytes.size());
  return Value(*std::move(t));
}

}  // namespace

absl::StatusOr<std::string> EncodeInlineValue(absl::string_view path, const Value& value) {
  SDRT_ASSIGN_OR_RETURN(const json encoded, EncodeInline(path, value));
  return ToBytes(encoded);
}

absl::StatusOr<Value> DecodeInlineValue(absl::string_view cbor) {
  if (!IsBoundedCbor(cbor)) return Malformed("not one bounded CBOR item");
  const json j = json::from_cbor(cbor, /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed("not CBOR");
  return DecodeInline(j);
}

}  // namespace sdrt::internal
