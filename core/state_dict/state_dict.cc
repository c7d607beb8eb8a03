#include "sdrt/core/state_dict/state_dict.h"

#include <cassert>
#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sdrt {

List::List(std::initializer_list<Value> init) : items(init) {}
List::List(std::vector<Value> items) : items(std::move(items)) {}
Tuple::Tuple(std::initializer_list<Value> init) : items(init) {}
Tuple::Tuple(std::vector<Value> items) : items(std::move(items)) {}

Map::Map(std::initializer_list<std::pair<std::string, Value>> init) {
  for (const auto& [key, value] : init) Set(key, value);
}
Map::Map(const Map& other) : keys_(other.keys_), values_(other.values_) { RebuildIndex(); }

Map& Map::operator=(const Map& other) {
  // Copy first: `other` may live inside this map (m = m.value(0).as_map()).
  if (this != &other) *this = Map(other);
  return *this;
}

void Map::RebuildIndex() {
  index_.clear();
  index_.reserve(keys_.size());
  for (size_t i = 0; i < keys_.size(); ++i) index_.emplace(keys_[i], i);
}

Value* Map::Find(absl::string_view key) {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &values_[it->second];
}

const Value* Map::Find(absl::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &values_[it->second];
}

void Map::Set(std::string key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    values_[it->second] = std::move(value);
    return;
  }
  // State dict maps are mostly small (a module's parameters): start at 8 entries rather
  // than growing through 1, 2, 4 (each growth moves every Value and rehashes).
  if (values_.capacity() == 0) Reserve(8);
  keys_.push_back(std::move(key));
  values_.push_back(std::move(value));
  index_.emplace(keys_.back(), keys_.size() - 1);
}

void Map::Reserve(size_t n) {
  values_.reserve(n);
  index_.reserve(n);
}

bool Map::Erase(absl::string_view key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  const size_t pos = it->second;
  keys_.erase(keys_.begin() + pos);
  values_.erase(values_.begin() + pos);
  RebuildIndex();  // the deque moved the later keys
  return true;
}

size_t Map::EraseIf(const std::function<bool(const std::string&, const Value&)>& pred) {
  size_t kept = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (pred(keys_[i], values_[i])) continue;
    if (kept != i) {
      keys_[kept] = std::move(keys_[i]);
      values_[kept] = std::move(values_[i]);
    }
    ++kept;
  }
  const size_t removed = keys_.size() - kept;
  if (removed == 0) return 0;
  keys_.resize(kept);
  values_.resize(kept);
  RebuildIndex();
  return removed;
}

const Value& Map::value(size_t i) const { return values_[i]; }
Value& Map::value(size_t i) { return values_[i]; }

absl::string_view ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kDouble:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kBytes:
      return "bytes";
    case ValueKind::kTensor:
      return "Tensor";
    case ValueKind::kDTensor:
      return "DTensor";
    case ValueKind::kShardedTensor:
      return "ShardedTensor";
    case ValueKind::kList:
      return "list";
    case ValueKind::kTuple:
      return "tuple";
    case ValueKind::kMap:
      return "dict";
    case ValueKind::kOpaque:
      return "object";
  }
  return "invalid";
}

const std::vector<Value>& Value::items() const {
  assert(is_sequence());
  return is_list() ? std::get<List>(v_).items : std::get<Tuple>(v_).items;
}

std::vector<Value>& Value::items() {
  assert(is_sequence());
  return is_list() ? std::get<List>(v_).items : std::get<Tuple>(v_).items;
}

const Value* Value::Find(absl::string_view key) const {
  return is_map() ? as_map().Find(key) : nullptr;
}

namespace {

bool SameTensor(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.device() != b.device()) return false;
  if (a.is_meta()) return true;
  absl::StatusOr<Tensor> ha = a.To(Device::CPU());
  absl::StatusOr<Tensor> hb = b.To(Device::CPU());
  if (!ha.ok() || !hb.ok()) return false;
  absl::StatusOr<Tensor> ca = ha->Contiguous();
  absl::StatusOr<Tensor> cb = hb->Contiguous();
  if (!ca.ok() || !cb.ok()) return false;
  return ca->nbytes() == 0 || std::memcmp(ca->data_ptr(), cb->data_ptr(), ca->nbytes()) == 0;
}

bool SameMetadata(const ShardMetadata& a, const ShardMetadata& b) {
  return a.offsets == b.offsets && a.sizes == b.sizes && a.placement.rank == b.placement.rank &&
         a.placement.device == b.placement.device;
}

bool SameItems(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace

bool operator==(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kNone:
      return true;
    case ValueKind::kBool:
      return a.as_bool() == b.as_bool();
    case ValueKind::kInt:
      return a.as_int() == b.as_int();
    case ValueKind::kDouble: {
      const double x = a.as_double();
      const double y = b.as_double();
      return (std::isnan(x) && std::isnan(y)) || std::memcmp(&x, &y, sizeof(x)) == 0;
    }
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kBytes:
      return a.as_bytes() == b.as_bytes();
    case ValueKind::kTensor:
      return SameTensor(a.as_tensor(), b.as_tensor());
    case ValueKind::kDTensor: {
      const DTensor& x = a.as_dtensor();
      const DTensor& y = b.as_dtensor();
      return x.global_shape() == y.global_shape() && x.global_stride() == y.global_stride() &&
             x.placements() == y.placements() && x.mesh() != nullptr && y.mesh() != nullptr &&
             *x.mesh() == *y.mesh() && SameTensor(x.local(), y.local());
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& x = a.as_sharded();
      const ShardedTensor& y = b.as_sharded();
      if (x.global_shape() != y.global_shape() || x.dtype() != y.dtype() ||
          x.shards_metadata().size() != y.shards_metadata().size() ||
          x.local_shards().size() != y.local_shards().size()) {
        return false;
      }
      for (size_t i = 0; i < x.shards_metadata().size(); ++i) {
        if (!SameMetadata(x.shards_metadata()[i], y.shards_metadata()[i])) return false;
      }
      for (size_t i = 0; i < x.local_shards().size(); ++i) {
        if (!SameMetadata(x.local_shards()[i].metadata, y.local_shards()[i].metadata) ||
            !SameTensor(x.local_shards()[i].tensor, y.local_shards()[i].tensor)) {
          return false;
        }
      }
      return true;
    }
    case ValueKind::kList:
    case ValueKind::kTuple:
      return SameItems(a.items(), b.items());
    case ValueKind::kMap: {
      const Map& x = a.as_map();
      const Map& y = b.as_map();
      if (x.keys() != y.keys()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x.value(i) != y.value(i)) return false;
      }
      return true;
    }
    case ValueKind::kOpaque:
      return a.as_opaque().object == b.as_opaque().object;
  }
  return false;
}

namespace {

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CEscape(s), "\""); }

std::string LeafString(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return v.as_bool() ? "True" : "False";
    case ValueKind::kInt:
      return absl::StrCat(v.as_int());
    case ValueKind::kDouble:
      return absl::StrCat(v.as_double());
    case ValueKind::kString:
      return Quote(v.as_string());
    case ValueKind::kBytes:
      return absl::StrCat("b", Quote(v.as_bytes().data));
    case ValueKind::kTensor:
      return v.as_tensor().ToString();
    case ValueKind::kDTensor:
      return v.as_dtensor().ToString();
    case ValueKind::kShardedTensor:
      return v.as_sharded().ToString();
    case ValueKind::kOpaque:
      return absl::StrCat("<", v.as_opaque().type_name, ">");
    default:
      return "";
  }
}

void Print(const Value& v, int indent, std::string* out) {
  const std::string pad(2 * (indent + 1), ' ');
  if (v.is_map()) {
    const Map& m = v.as_map();
    if (m.empty()) {
      out->append("{}");
      return;
    }
    out->append("{\n");
    for (size_t i = 0; i < m.size(); ++i) {
      absl::StrAppend(out, pad, Quote(m.key(i)), ": ");
      Print(m.value(i), indent + 1, out);
      out->append("\n");
    }
    absl::StrAppend(out, std::string(2 * indent, ' '), "}");
    return;
  }
  if (v.is_sequence()) {
    const char* open = v.is_list() ? "[" : "(";
    const char* close = v.is_list() ? "]" : ")";
    if (v.items().empty()) {
      absl::StrAppend(out, open, close);
      return;
    }
    absl::StrAppend(out, open, "\n");
    for (const Value& item : v.items()) {
      out->append(pad);
      Print(item, indent + 1, out);
      out->append("\n");
    }
    absl::StrAppend(out, std::string(2 * indent, ' '), close);
    return;
  }
  out->append(LeafString(v));
}

}  // namespace

std::string DebugString(const Value& value) {
  std::string out;
  Print(value, 0, &out);
  return out;
}

}  // namespace sdrt
