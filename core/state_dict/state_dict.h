// The state dict value tree: what a PyTorch state dict holds, as a C++ value.
//
// A Value is one of: None, bool, int64, double, string, bytes, Tensor, DTensor,
// ShardedTensor, list, tuple, map (string keys, insertion order kept, O(1) lookup) and
// Opaque (an outside object with a clone function, standing in for the arbitrary Python
// objects state dicts sometimes carry, io.BytesIO among them).
//
// Copying a Value copies the tree (maps, lists, strings) but not tensor bytes: tensors
// are handles that alias their storage, as PyTorch tensors in a copied dict do. Build
// trees with initializer lists:
//
//   Value sd = Map{{"model", Map{{"w", tensor}, {"step", 7}}},
//                  {"betas", Tuple{0.9, 0.999}}, {"groups", List{Map{{"lr", 1e-3}}}}};
//
// Keys are strings. Python state dicts can have integer keys (optimizer states keyed by
// parameter index); files written from Python reach sdrt with such keys as their decimal
// string ("0", "1"), which is also what PyTorch's own flatten makes of them.
#ifndef SDRT_CORE_STATE_DICT_STATE_DICT_H_
#define SDRT_CORE_STATE_DICT_STATE_DICT_H_

#include <cassert>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class Value;

// A Python `bytes` value (distinct from a string).
struct Bytes {
  std::string data;
  friend bool operator==(const Bytes& a, const Bytes& b) { return a.data == b.data; }
};

// An object sdrt does not understand (PyTorch's "other" values, io.BytesIO, ...). It is
// shared by reference like Python objects; `clone` makes the deep copy that
// _iterate_state_dict's deepcopy makes when type checking is off.
struct Opaque {
  std::shared_ptr<void> object;
  std::string type_name;  // shown in printing and in type-check errors
  std::function<Opaque(const Opaque&)> clone;
};

struct None {
  friend bool operator==(None, None) { return true; }
};

struct List {
  List() = default;
  List(std::initializer_list<Value> init);
  explicit List(std::vector<Value> items);
  std::vector<Value> items;
};

struct Tuple {
  Tuple() = default;
  Tuple(std::initializer_list<Value> init);
  explicit Tuple(std::vector<Value> items);
  std::vector<Value> items;
};

// An insertion-ordered map from string keys to Values with O(1) lookup.
class Map {
 public:
  Map() = default;
  Map(std::initializer_list<std::pair<std::string, Value>> init);
  Map(const Map& other);
  Map& operator=(const Map& other);
  Map(Map&&) noexcept = default;
  Map& operator=(Map&&) noexcept = default;

  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  bool contains(absl::string_view key) const { return index_.contains(key); }
  // The value under `key`, or nullptr.
  Value* Find(absl::string_view key);
  const Value* Find(absl::string_view key) const;
  // Python's d[key] = value: overwrites in place (keeping the position) or appends.
  void Set(std::string key, Value value);
  // Removes `key` if present. Returns whether it was there. O(n): later entries move up
  // and the index is rebuilt; to remove many keys use EraseIf, one pass for all of them.
  bool Erase(absl::string_view key);
  // Removes every entry for which pred(key, value) is true, keeping the order of the rest,
  // in one O(n) pass. Returns how many were removed.
  size_t EraseIf(const std::function<bool(const std::string&, const Value&)>& pred);
  // Makes room for `n` entries without reallocating.
  void Reserve(size_t n);

  // Entries in insertion order.
  const std::string& key(size_t i) const { return keys_[i]; }
  const Value& value(size_t i) const;
  Value& value(size_t i);
  const std::deque<std::string>& keys() const { return keys_; }

 private:
  void RebuildIndex();

  // Each key is stored once: the index holds views of the strings in keys_, whose
  // addresses a deque keeps stable under push_back and under moves of the whole Map
  // (copies and erases rebuild the index).
  std::deque<std::string> keys_;
  std::vector<Value> values_;
  absl::flat_hash_map<absl::string_view, size_t> index_;
};

// The deepest nesting of maps, lists and tuples the operations walk (they recurse, as
// PyTorch's do; PyTorch stops at its recursion limit of about 1,000). Deeper trees are
// InvalidArgument instead of a stack overflow.
inline constexpr size_t kMaxNestingDepth = 1000;

enum class ValueKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kDouble,
  kString,
  kBytes,
  kTensor,
  kDTensor,
  kShardedTensor,
  kList,
  kTuple,
  kMap,
  kOpaque,
};
absl::string_view ValueKindName(ValueKind kind);  // "int", "DTensor", "map", ...

class Value {
 public:
  Value() : v_(None{}) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  // Any integer type but bool becomes int64 (a uint64 above INT64_MAX wraps, as a cast).
  template <typename I,
            std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>, int> = 0>
  Value(I i) : v_(static_cast<int64_t>(i)) {}
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(Bytes b) : v_(std::move(b)) {}
  Value(Tensor t) : v_(std::move(t)) {}
  Value(DTensor t) : v_(std::make_shared<const DTensor>(std::move(t))) {}
  // Shares `t` (not null: a debug assert), a DTensor owned elsewhere that no one mutates
  // while a Value holds it: e.g. one of many made in one allocation and held through
  // shared_ptr's aliasing constructor, as LoadStateDict and BroadcastStateDict make theirs.
  explicit Value(std::shared_ptr<const DTensor> t) : v_(std::move(t)) {
    assert(std::get<std::shared_ptr<const DTensor>>(v_) != nullptr);
  }
  Value(ShardedTensor t) : v_(std::make_shared<const ShardedTensor>(std::move(t))) {}
  Value(List l) : v_(std::move(l)) {}
  Value(Tuple t) : v_(std::move(t)) {}
  Value(Map m) : v_(std::move(m)) {}
  Value(Opaque o) : v_(std::move(o)) {}
  Value(const Value&) = default;
  Value(Value&&) noexcept = default;
  // Copies before replacing, so assigning a part of this value works (v = v.items()[0]).
  Value& operator=(const Value& other) {
    if (this != &other) v_ = Value(other).v_;
    return *this;
  }
  Value& operator=(Value&& other) noexcept = default;

  ValueKind kind() const { return static_cast<ValueKind>(v_.index()); }
  bool is_none() const { return kind() == ValueKind::kNone; }
  bool is_map() const { return kind() == ValueKind::kMap; }
  bool is_list() const { return kind() == ValueKind::kList; }
  bool is_tuple() const { return kind() == ValueKind::kTuple; }
  bool is_sequence() const { return is_list() || is_tuple(); }
  // Tensor, DTensor or ShardedTensor (what PyTorch's isinstance(x, torch.Tensor) accepts).
  bool is_any_tensor() const {
    return kind() == ValueKind::kTensor || kind() == ValueKind::kDTensor ||
           kind() == ValueKind::kShardedTensor;
  }

  // Accessors; calling the one for another kind is a programming error (std::get throws
  // bad_variant_access; items() also debug-asserts). Check kind() first.
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_double() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const Bytes& as_bytes() const { return std::get<Bytes>(v_); }
  const Tensor& as_tensor() const { return std::get<Tensor>(v_); }
  const DTensor& as_dtensor() const { return *std::get<std::shared_ptr<const DTensor>>(v_); }
  const ShardedTensor& as_sharded() const {
    return *std::get<std::shared_ptr<const ShardedTensor>>(v_);
  }
  const Map& as_map() const { return std::get<Map>(v_); }
  Map& as_map() { return std::get<Map>(v_); }
  const Opaque& as_opaque() const { return std::get<Opaque>(v_); }
  // The items of a list or a tuple.
  const std::vector<Value>& items() const;
  std::vector<Value>& items();

  // Convenience: the value under `key` of a map value, or nullptr (also for non-maps).
  const Value* Find(absl::string_view key) const;

 private:
  // Order matches ValueKind. DTensor and ShardedTensor are held through immutable shared
  // objects so that a Value stays the size of a Tensor handle (a map of 10,000 leaves
  // moves half the bytes); copying a Value shares them, which is safe as nothing mutates
  // them through a Value.
  std::variant<None, bool, int64_t, double, std::string, Bytes, Tensor,
               std::shared_ptr<const DTensor>, std::shared_ptr<const ShardedTensor>, List, Tuple,
               Map, Opaque>
      v_;
};

// Structure and values equal: same kinds (a list never equals a tuple), map keys in the
// same order, tensors of the same dtype, shape, device, placements/shard metadata and
// bytes (CPU tensors compared byte for byte; CUDA tensors are copied to the host first;
// meta tensors by metadata), doubles bit-equal or both NaN, opaque values by identity.
bool operator==(const Value& a, const Value& b);
inline bool operator!=(const Value& a, const Value& b) { return !(a == b); }

// A readable tree, one leaf per line, with shapes, dtypes, devices and placements:
//   {
//     "w": float32[4, 4] cpu
//     "opt": {"betas": (0.9, 0.999)}
//   }
std::string DebugString(const Value& value);

}  // namespace sdrt

#endif  // SDRT_CORE_STATE_DICT_STATE_DICT_H_
