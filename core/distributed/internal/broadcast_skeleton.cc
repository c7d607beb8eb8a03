#include "sdrt/core/distributed/internal/broadcast_skeleton.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/iterate.h"

namespace sdrt::internal {
namespace {

using json = nlohmann::json;

std::string ToBytes(const json& j) {
  const std::vector<uint8_t> cbor = json::to_cbor(j);
  return std::string(cbor.begin(), cbor.end());
}

std::string EncodeError(const absl::Status& status) {
  return ToBytes(
      json{{"error", std::string(status.message())}, {"code", static_cast<int>(status.code())}});
}

json Binary(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  return json::binary(std::vector<uint8_t>(p, p + n));
}

// The inline form of a non-tensor leaf or a 0-dim tensor; an error for what cannot travel.
absl::StatusOr<json> EncodeInline(const std::string& path, const Value& v) {
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
                  {"v", Binary(t.data_ptr(), static_cast<size_t>(t.element_size()))}};
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "': a ", ValueKindName(v.kind()),
          " cannot be broadcast from a full state dict (plain tensors and Python scalars only)"));
  }
}

absl::StatusOr<Value> DecodeInline(const json& j) {
  const std::string k = j.at("k").get<std::string>();
  if (k == "none") return Value(None{});
  if (k == "bool") return Value(j.at("v").get<bool>());
  if (k == "int") return Value(j.at("v").get<int64_t>());
  if (k == "float") return Value(j.at("v").get<double>());
  const std::vector<uint8_t>& bin = j.at("v").get_binary();
  const std::string bytes(bin.begin(), bin.end());
  if (k == "str") return Value(bytes);
  if (k == "bytes") return Value(Bytes{bytes});
  if (k == "scalar") {
    absl::StatusOr<DType> dtype = DTypeFromName(j.at("d").get<std::string>());
    if (!dtype.ok()) return dtype.status();
    absl::StatusOr<Tensor> t = Tensor::Empty({}, *dtype);
    if (!t.ok()) return t.status();
    if (static_cast<int64_t>(bytes.size()) != t->element_size()) {
      return absl::DataLossError("broadcast skeleton: scalar of the wrong size");
    }
    std::memcpy(t->data_ptr(), bytes.data(), bytes.size());
    return Value(*std::move(t));
  }
  return absl::DataLossError(absl::StrCat("broadcast skeleton: unknown inline kind ", k));
}

}  // namespace

std::string EncodeBroadcastSkeleton(const Map& full, std::vector<Tensor>* tensors) {
  absl::StatusOr<std::vector<Leaf>> leaves = CollectLeaves(full);
  if (!leaves.ok()) return EncodeError(leaves.status());
  json entries = json::array();
  for (const Leaf& leaf : *leaves) {
    const Value& v = *leaf.value;
    if (v.kind() == ValueKind::kTensor && v.as_tensor().dim() > 0) {
      const Tensor& t = v.as_tensor();
      if (t.device().is_meta()) {
        return EncodeError(absl::FailedPreconditionError(
            absl::StrCat("'", leaf.path, "': the full state dict holds a meta tensor (no data)")));
      }
      json shape = json::array();
      for (int64_t s : t.shape()) shape.push_back(s);
      entries.push_back({{"p", leaf.path}, {"d", std::string(DTypeName(t.dtype()))}, {"s", shape}});
      tensors->push_back(t);
      continue;
    }
    absl::StatusOr<json> encoded = EncodeInline(leaf.path, v);
    if (!encoded.ok()) return EncodeError(encoded.status());
    entries.push_back({{"p", leaf.path}, {"i", *std::move(encoded)}});
  }
  return ToBytes(json{{"entries", std::move(entries)}});
}

absl::StatusOr<std::vector<SkeletonEntry>> DecodeBroadcastSkeleton(const std::string& bytes) {
  const json j = json::from_cbor(bytes, /*strict=*/true, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError("broadcast skeleton: not CBOR");
  }
  try {
    if (j.contains("error")) {
      return absl::Status(static_cast<absl::StatusCode>(j.at("code").get<int>()),
                          j.at("error").get<std::string>());
    }
    std::vector<SkeletonEntry> entries;
    for (const json& e : j.at("entries")) {
      SkeletonEntry entry;
      entry.path = e.at("p").get<std::string>();
      if (e.contains("i")) {
        absl::StatusOr<Value> v = DecodeInline(e.at("i"));
        if (!v.ok()) return v.status();
        entry.value = *std::move(v);
      } else {
        entry.is_tensor = true;
        absl::StatusOr<DType> dtype = DTypeFromName(e.at("d").get<std::string>());
        if (!dtype.ok()) return dtype.status();
        entry.dtype = *dtype;
        for (const json& s : e.at("s")) entry.shape.push_back(s.get<int64_t>());
      }
      entries.push_back(std::move(entry));
    }
    return entries;
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat("broadcast skeleton: ", e.what()));
  }
}

}  // namespace sdrt::internal
