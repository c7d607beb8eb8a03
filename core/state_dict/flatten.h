// Traverse, flatten and unflatten a state dict: PyTorch's _traverse_state_dict,
// _flatten_state_dict, _set_element and _unflatten_state_dict
// (torch/distributed/_state_dict_utils.py), with the same keys, paths, order and errors.
//
// Flattening turns a nested tree into one level of dotted keys, remembering for each key
// the object path it came from:
//
//   {"a": {"b": 1, "c": [2, (3, 4)], "e": {}}, "5": {"x": None}, "t": (7,)}
//   flat:    a.b=1, a.c.0=2, a.c.1.0=3, a.c.1.1=4, 5.x=None, t.0=7
//   mapping: a.b -> ("a", "b"), a.c.1.0 -> ("a", "c", 1, 0), ...
//
// Maps extend the path with their key, lists AND tuples with the integer index;
// everything else is a leaf (None, bytes, scalars, tensors, opaque objects). Values are
// shared, not copied: tensor handles in the flat dict alias the input's storage.
//
// Round trip. UnflattenStateDict(FlattenStateDict(sd)) gives sd back except, as in
// PyTorch:
//   * tuples come back as lists ({"t": (10, 20)} -> {"t": [10, 20]}, case-032);
//   * empty containers vanish ({"e": {}} -> {}); an empty container inside a list leaves
//     a None hole ({"a": [[], 1]} -> {"a": [None, 1]});
//   * Python int keys become strings (sdrt already holds them as decimal strings).
// Keys containing '.' round-trip exactly (case-031: {"a.b": 1, "c": {"d": 2}}), because
// unflatten rebuilds from the stored path and never splits a key. They can collide with
// a nested key ({"a.b": 1, "a": {"b": 2}}): flatten then fails, as PyTorch does.
//
// Cost (bench/state_dict_bench.cc): FlattenStateDict walks the tree twice, once to size
// the mapping's buffers and once to fill them; UnflattenStateDict resumes each path below
// the prefix it shares with the previous one, so for a mapping in traversal order it does
// about one map insertion per leaf.
//
// Thread-safety: none of these functions keeps state; distinct trees may be processed
// on distinct threads.
#ifndef SDRT_CORE_STATE_DICT_FLATTEN_H_
#define SDRT_CORE_STATE_DICT_FLATTEN_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// One step of an object path (PyTorch's OBJ_PATH item): a map key or a list/tuple index.
using PathItem = std::variant<std::string, int64_t>;
// PyTorch's OBJ_PATH: the steps from the root map to a leaf (owning form)...
using ObjPath = std::vector<PathItem>;
// ... and the form functions take and the mapping hands out (an ObjPath converts to it).
using PathSpan = absl::Span<const PathItem>;

// The flatten key of `path`: its items joined by '.', indices in decimal ("a.c.1.0").
// Different paths can give the same string (("a.b",) and ("a", "b")).
std::string PathToString(PathSpan path);

// PyTorch's FLATTEN_MAPPING: flat key -> object path, in insertion order, O(1) lookup.
// Stored compactly (all keys in one buffer, all path items in one array, an index of
// positions), so a 10,000-entry mapping costs a handful of allocations, not 40,000.
// Keys and paths handed out stay valid until the mapping is changed or destroyed (moving
// keeps them valid). A moved-from mapping is empty and usable.
class FlattenMapping {
 public:
  FlattenMapping();
  FlattenMapping(const FlattenMapping& other);
  FlattenMapping& operator=(const FlattenMapping& other);
  FlattenMapping(FlattenMapping&&) noexcept = default;
  FlattenMapping& operator=(FlattenMapping&&) noexcept = default;

  // Appends key -> path and returns true when `key` is new; returns false (changing
  // nothing) when it is already there.
  bool Insert(absl::string_view key, PathSpan path);
  // Room for `entries` entries holding `key_chars` key bytes and `path_items` path items
  // in all, without reallocating.
  void Reserve(size_t entries, size_t key_chars, size_t path_items);
  // The path stored under `key`, or nullopt.
  std::optional<PathSpan> Find(absl::string_view key) const;

  size_t size() const { return path_ends_.size(); }
  bool empty() const { return path_ends_.empty(); }
  // Entries in insertion order.
  absl::string_view key(size_t i) const { return keys_->Get(i); }
  PathSpan path(size_t i) const;

 private:
  // The keys, back to back. Behind a pointer so that moving the mapping leaves it (and
  // the index's functors that point at it) in place.
  struct Keys {
    std::string chars;
    std::vector<size_t> ends;  // key i is chars[ends[i-1], ends[i])
    absl::string_view Get(size_t i) const;
  };
  // Hash and equality of positions by the key they name, and of keys (heterogeneous
  // lookup by string_view).
  struct KeyHash {
    using is_transparent = void;
    const Keys* keys;
    size_t operator()(size_t i) const;
    size_t operator()(absl::string_view key) const;
  };
  struct KeyEq {
    using is_transparent = void;
    const Keys* keys;
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a) == View(b);
    }
    absl::string_view View(size_t i) const { return keys->Get(i); }
    absl::string_view View(absl::string_view key) const { return key; }
  };
  // A fresh empty mapping (also what a moved-from one becomes on its next Insert).
  void Reset();

  std::unique_ptr<Keys> keys_;
  std::vector<PathItem> items_;    // the paths, back to back
  std::vector<size_t> path_ends_;  // path i is items_[path_ends_[i-1], path_ends_[i])
  absl::flat_hash_set<size_t, KeyHash, KeyEq> index_;  // positions, looked up by key
};

// Mirrors _traverse_state_dict: calls `visitor(path, leaf)` for every leaf of `sd`, depth
// first in insertion/index order. Empty containers produce no call. `path` is valid only
// during the call. A non-OK status from the visitor stops the walk and is returned.
absl::Status TraverseStateDict(const Map& sd,
                               const std::function<absl::Status(PathSpan, const Value&)>& visitor);

// The result of FlattenStateDict: PyTorch's (flattened, mappings) pair. `flat` and
// `mapping` hold the same keys in the same (traversal) order.
struct FlatStateDict {
  Map flat;
  FlattenMapping mapping;
};

// Mirrors _flatten_state_dict: one entry per leaf under PathToString(path). Leaves are
// shared with `sd` (Value copies: tensor handles alias). InvalidArgument
// "duplicated flatten key <key>" when two paths give the same key.
absl::StatusOr<FlatStateDict> FlattenStateDict(const Map& sd);

// Mirrors _set_element: stores `value` at `path` under `root`, creating containers on
// the way (a dict when the next item is a string, a list when it is an index), padding
// lists with None up to an index, and replacing a None list entry on the way with a new
// container. Existing containers are kept whatever the next item is; an integer item
// addressing a dict is used as its decimal string key (Python would keep int 0 and "0"
// apart; sdrt's maps have string keys only). InvalidArgument naming the path where
// PyTorch raises or where sdrt cannot follow it:
//   * the path is empty (PyTorch: IndexError);
//   * the path goes through a leaf (PyTorch: TypeError; for a tensor leaf PyTorch would
//     index into the tensor and write the value into it in place);
//   * a string item addresses a list or tuple (PyTorch: TypeError);
//   * a tuple would have to change (PyTorch: TypeError or AttributeError);
//   * a negative index reaches before the start of a list or tuple (a negative index
//     counts from the end, as in Python; PyTorch: IndexError);
//   * the LAST item is an integer k addressing a dict of at most k entries (PyTorch tries
//     to pad the dict like a list and raises AttributeError; with more entries it sets
//     key k, as here).
// On error, containers created or padded before the failing step stay in `root`, as in
// PyTorch.
absl::Status SetElement(Map& root, PathSpan path, Value value);

// Mirrors _unflatten_state_dict: a new map built by SetElement(mapping[key], value) for
// each (key, value) of `flat` in order (values shared, as in FlattenStateDict). Keys of
// `mapping` absent from `flat` are ignored. NotFound naming the key when a key of `flat`
// is not in `mapping`; SetElement's errors otherwise.
absl::StatusOr<Map> UnflattenStateDict(const Map& flat, const FlattenMapping& mapping);

}  // namespace sdrt

#endif  // SDRT_CORE_STATE_DICT_FLATTEN_H_
