#include "sdrt/tests/support/golden_codec.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"

namespace sdrt {
namespace testing_golden {
namespace {

using json = nlohmann::json;

absl::Status Bad(absl::string_view what, const json& j) {
  return absl::InvalidArgumentError(absl::StrCat("golden value: ", what, " in ", j.dump()));
}

// Validating hex decoder (absl::HexStringToBytes accepts anything).
absl::StatusOr<std::string> FromHex(const json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_string()) {
    return Bad(absl::StrCat("missing string field \"", field, "\""), j);
  }
  const std::string& hex = j[field].get_ref<const std::string&>();
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return Bad(absl::StrCat("odd-length \"", field, "\""), j);
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Bad(absl::StrCat("non-hex digit in \"", field, "\""), j);
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

absl::StatusOr<int64_t> ToInt64(const json& v, const json& context) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  return Bad("expected an int64", context);
}

absl::StatusOr<IntVector> IntArray(const json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_array()) {
    return Bad(absl::StrCat("missing array field \"", field, "\""), j);
  }
  IntVector out;
  for (const json& e : j[field]) {
    absl::StatusOr<int64_t> i = ToInt64(e, j);
    if (!i.ok()) return i.status();
    out.push_back(*i);
  }
  return out;
}

absl::StatusOr<std::string> StringField(const json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_string()) {
    return Bad(absl::StrCat("missing string field \"", field, "\""), j);
  }
  return j[field].get<std::string>();
}

absl::StatusOr<Tensor> DecodeTensor(const json& j) {
  absl::StatusOr<std::string> dtype_name = StringField(j, "dtype");
  if (!dtype_name.ok()) return dtype_name.status();
  absl::StatusOr<DType> dtype = DTypeFromName(*dtype_name);
  if (!dtype.ok()) return dtype.status();
  absl::StatusOr<IntVector> shape = IntArray(j, "shape");
  if (!shape.ok()) return shape.status();
  const std::string device = j.value("device", std::string("cpu"));
  if (device == "meta") return Tensor::Meta(*shape, *dtype);
  if (device != "cpu") return Bad("tensors are \"cpu\" or \"meta\"", j);
  absl::StatusOr<std::string> bytes = FromHex(j, "hex");
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<Tensor> t = Tensor::Empty(*shape, *dtype);
  if (!t.ok()) return t.status();
  if (static_cast<int64_t>(bytes->size()) != t->nbytes()) {
    return Bad(absl::StrCat("hex holds ", bytes->size(), " bytes, shape needs ", t->nbytes()), j);
  }
  if (!bytes->empty()) std::memcpy(t->data_ptr(), bytes->data(), bytes->size());
  return t;
}

absl::StatusOr<Value> DecodeDTensor(const json& j) {
  absl::StatusOr<IntVector> mesh_shape = IntArray(j, "mesh_shape");
  if (!mesh_shape.ok()) return mesh_shape.status();
  absl::StatusOr<DeviceMesh> mesh = DeviceMesh::Create(*mesh_shape);
  if (!mesh.ok()) return mesh.status();
  absl::StatusOr<std::string> placements_text = StringField(j, "placements");
  if (!placements_text.ok()) return placements_text.status();
  absl::StatusOr<std::vector<Placement>> placements = ParsePlacements(*placements_text);
  if (!placements.ok()) return placements.status();
  absl::StatusOr<IntVector> global_shape = IntArray(j, "global_shape");
  if (!global_shape.ok()) return global_shape.status();
  absl::StatusOr<IntVector> global_stride = IntArray(j, "global_stride");
  if (!global_stride.ok()) return global_stride.status();
  if (!j.contains("local") || !j["local"].is_object()) return Bad("missing \"local\"", j);
  absl::StatusOr<Tensor> local = DecodeTensor(j["local"]);
  if (!local.ok()) return local.status();
  absl::StatusOr<DTensor> dt =
      DTensor::Make(*std::move(local), std::make_shared<const DeviceMesh>(*std::move(mesh)),
                    *std::move(placements), *global_shape, *global_stride);
  if (!dt.ok()) return dt.status();
  return Value(*std::move(dt));
}

absl::StatusOr<std::vector<Value>> DecodeItems(const json& j) {
  if (!j.contains("items") || !j["items"].is_array()) return Bad("missing array \"items\"", j);
  std::vector<Value> items;
  items.reserve(j["items"].size());
  for (const json& e : j["items"]) {
    absl::StatusOr<Value> v = DecodeGoldenValue(e);
    if (!v.ok()) return v.status();
    items.push_back(*std::move(v));
  }
  return items;
}

absl::StatusOr<Value> DecodeDict(const json& j) {
  if (!j.contains("items") || !j["items"].is_array()) return Bad("missing array \"items\"", j);
  Map m;
  for (const json& kv : j["items"]) {
    if (!kv.is_array() || kv.size() != 2) return Bad("a dict item is not [key, value]", j);
    std::string key;
    if (kv[0].is_string()) {
      key = kv[0].get<std::string>();
    } else {
      absl::StatusOr<int64_t> i = ToInt64(kv[0], j);
      if (!i.ok()) return Bad("a dict key is neither a string nor an int64", j);
      key = absl::StrCat(*i);
    }
    if (m.contains(key)) return Bad(absl::StrCat("duplicate dict key \"", key, "\""), j);
    absl::StatusOr<Value> v = DecodeGoldenValue(kv[1]);
    if (!v.ok()) return v.status();
    m.Set(std::move(key), *std::move(v));
  }
  return Value(std::move(m));
}

Opaque FreshOpaque(const std::string& name) {
  Opaque o;
  o.object = std::make_shared<std::string>(name);
  o.type_name = name;
  o.clone = [](const Opaque& self) { return FreshOpaque(self.type_name); };
  return o;
}

json EncodeTensor(const Tensor& t) {
  json j = {{"type", "tensor"}};
  if (!t.defined()) {
    j["undefined"] = true;
    return j;
  }
  j["dtype"] = std::string(DTypeName(t.dtype()));
  j["shape"] = std::vector<int64_t>(t.shape().begin(), t.shape().end());
  if (!t.device().is_cpu()) j["device"] = t.device().ToString();
  if (t.is_meta()) return j;
  absl::StatusOr<Tensor> host = t.To(Device::CPU());
  if (host.ok()) host = host->Contiguous();
  if (!host.ok()) {
    j["hex_error"] = host.status().ToString();
    return j;
  }
  j["hex"] = absl::BytesToHexString(absl::string_view(static_cast<const char*>(host->data_ptr()),
                                                      static_cast<size_t>(host->nbytes())));
  return j;
}

json EncodeItems(const std::vector<Value>& items) {
  json out = json::array();
  for (const Value& v : items) out.push_back(EncodeGoldenValue(v));
  return out;
}

}  // namespace

absl::StatusOr<Value> DecodeGoldenValue(const json& j) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Bad("not an object with a string \"type\"", j);
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  if (type == "none") return Value(None{});
  if (type == "bool") {
    if (!j.contains("value") || !j["value"].is_boolean()) return Bad("bad bool", j);
    return Value(j["value"].get<bool>());
  }
  if (type == "int") {
    if (!j.contains("value")) return Bad("missing \"value\"", j);
    absl::StatusOr<int64_t> i = ToInt64(j["value"], j);
    if (!i.ok()) return i.status();
    return Value(*i);
  }
  if (type == "float") {
    if (!j.contains("value")) return Bad("missing \"value\"", j);
    const json& v = j["value"];
    if (v.is_number()) return Value(v.get<double>());
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    if (s == "nan") return Value(std::numeric_limits<double>::quiet_NaN());
    if (s == "inf") return Value(std::numeric_limits<double>::infinity());
    if (s == "-inf") return Value(-std::numeric_limits<double>::infinity());
    return Bad("bad float", j);
  }
  if (type == "str") {
    absl::StatusOr<std::string> s = StringField(j, "value");
    if (!s.ok()) return s.status();
    return Value(*std::move(s));
  }
  if (type == "bytes") {
    absl::StatusOr<std::string> b = FromHex(j, "hex");
    if (!b.ok()) return b.status();
    return Value(Bytes{*std::move(b)});
  }
  if (type == "tensor") {
    absl::StatusOr<Tensor> t = DecodeTensor(j);
    if (!t.ok()) return t.status();
    return Value(*std::move(t));
  }
  if (type == "dtensor") return DecodeDTensor(j);
  if (type == "list" || type == "tuple") {
    absl::StatusOr<std::vector<Value>> items = DecodeItems(j);
    if (!items.ok()) return items.status();
    if (type == "list") return Value(List(*std::move(items)));
    return Value(Tuple(*std::move(items)));
  }
  if (type == "dict") return DecodeDict(j);
  if (type == "object") {
    absl::StatusOr<std::string> name = StringField(j, "name");
    if (!name.ok()) return name.status();
    return Value(FreshOpaque(*name));
  }
  return Bad(absl::StrCat("unknown type \"", type, "\""), j);
}

json EncodeGoldenValue(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kNone:
      return {{"type", "none"}};
    case ValueKind::kBool:
      return {{"type", "bool"}, {"value", v.as_bool()}};
    case ValueKind::kInt:
      return {{"type", "int"}, {"value", v.as_int()}};
    case ValueKind::kDouble: {
      const double d = v.as_double();
      if (std::isnan(d)) return {{"type", "float"}, {"value", "nan"}};
      if (std::isinf(d)) return {{"type", "float"}, {"value", d > 0 ? "inf" : "-inf"}};
      return {{"type", "float"}, {"value", d}};
    }
    case ValueKind::kString:
      return {{"type", "str"}, {"value", v.as_string()}};
    case ValueKind::kBytes:
      return {{"type", "bytes"}, {"hex", absl::BytesToHexString(v.as_bytes().data)}};
    case ValueKind::kTensor:
      return EncodeTensor(v.as_tensor());
    case ValueKind::kDTensor: {
      const DTensor& d = v.as_dtensor();
      const IntVector mesh_shape = d.mesh() ? d.mesh()->shape() : IntVector{};
      return {
          {"type", "dtensor"},
          {"mesh_shape", std::vector<int64_t>(mesh_shape.begin(), mesh_shape.end())},
          {"placements", PlacementsToString(d.placements())},
          {"global_shape", std::vector<int64_t>(d.global_shape().begin(), d.global_shape().end())},
          {"global_stride",
           std::vector<int64_t>(d.global_stride().begin(), d.global_stride().end())},
          {"local", EncodeTensor(d.local())}};
    }
    case ValueKind::kShardedTensor:
      return {{"type", "sharded_tensor"}, {"repr", v.as_sharded().ToString()}};
    case ValueKind::kList:
      return {{"type", "list"}, {"items", EncodeItems(v.items())}};
    case ValueKind::kTuple:
      return {{"type", "tuple"}, {"items", EncodeItems(v.items())}};
    case ValueKind::kMap: {
      const Map& m = v.as_map();
      json items = json::array();
      for (size_t i = 0; i < m.size(); ++i) {
        items.push_back(json::array({m.key(i), EncodeGoldenValue(m.value(i))}));
      }
      return {{"type", "dict"}, {"items", std::move(items)}};
    }
    case ValueKind::kOpaque:
      return {{"type", "object"}, {"name", v.as_opaque().type_name}};
  }
  return {{"type", "invalid"}};
}

absl::StatusOr<json> ReadGoldenJson(const std::string& relative_path) {
  const std::string path = absl::StrCat(SDRT_TEST_DATA_DIR, "/", relative_path);
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open golden file ", path));
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat("invalid JSON in ", path));
  return j;
}

}  // namespace testing_golden
}  // namespace sdrt
