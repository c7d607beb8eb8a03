// The leaves of a state dict in walk order (TreeWalker's,
// core/state_dict/internal/tree_walker.h: depth first, map insertion order, list items by
// index), each with its dotted path and where it sits, for the distributed operations that
// plan all their collectives before moving data. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// A leaf: any value that is not a map, list or tuple (empty containers have no leaves).
// `value` points into the walked tree; `parent_map` is the map holding it (nullptr when a
// list or tuple item) under `key`. `path` and `key` view the tree's own key strings (a leaf
// of the top-level map: path == key, nothing is built) or the list's built paths; they stay
// valid while the tree's keys are not changed and the list lives. Erase leaves only through
// EraseLeaves (erasing a map key moves the others' strings).
template <typename V, typename M>
struct LeafT {
  absl::string_view path;  // "layers.0.weight": keys and indices joined by '.'
  V* value = nullptr;
  M* parent_map = nullptr;
  absl::string_view key;
};

// The leaves of one tree and the paths built for its nested ones.
template <typename V, typename M>
class LeafList {
 public:
  using Leaf = LeafT<V, M>;
  LeafList() = default;
  LeafList(LeafList&&) noexcept = default;
  LeafList& operator=(LeafList&&) noexcept = default;
  LeafList(const LeafList&) = delete;
  LeafList& operator=(const LeafList&) = delete;

  size_t size() const { return leaves_.size(); }
  bool empty() const { return leaves_.empty(); }
  Leaf& operator[](size_t i) { return leaves_[i]; }
  const Leaf& operator[](size_t i) const { return leaves_[i]; }
  typename std::vector<Leaf>::iterator begin() { return leaves_.begin(); }
  typename std::vector<Leaf>::iterator end() { return leaves_.end(); }
  typename std::vector<Leaf>::const_iterator begin() const { return leaves_.begin(); }
  typename std::vector<Leaf>::const_iterator end() const { return leaves_.end(); }

 private:
  template <typename V2, typename M2>
  friend absl::StatusOr<LeafList<V2, M2>> CollectLeavesOf(M2& root);
  std::vector<Leaf> leaves_;
  std::deque<std::string> paths_;  // nested leaves' paths (a deque: views stay valid)
};

using Leaf = LeafT<const Value, const Map>;
using MutableLeaf = LeafT<Value, Map>;
using Leaves = LeafList<const Value, const Map>;
using MutableLeaves = LeafList<Value, Map>;

// TreeWalker's InvalidArgument naming the path when nesting exceeds kMaxNestingDepth.
absl::StatusOr<Leaves> CollectLeaves(const Map& root);
absl::StatusOr<MutableLeaves> CollectMutableLeaves(Map& root);

// For each element of `from`, the index of the element of `to` with the same path, or -1
// (`path_of` gives an element's path, of either list). When both lists hold the same paths
// in the same order (state dicts made alike, the common case) this costs one comparison
// per element and pairs equal paths by position; otherwise a hash map of `to`'s paths
// answers, the first of equal paths winning.
template <typename From, typename To, typename PathOf>
std::vector<int64_t> MatchPaths(const From& from, const To& to, PathOf path_of) {
  std::vector<int64_t> match(from.size(), -1);
  bool aligned = from.size() == to.size();
  for (size_t i = 0; aligned && i < from.size(); ++i) {
    aligned = absl::string_view(path_of(from[i])) == absl::string_view(path_of(to[i]));
    match[i] = static_cast<int64_t>(i);
  }
  if (aligned) return match;
  absl::flat_hash_map<absl::string_view, int64_t> by_path;
  by_path.reserve(to.size());
  for (size_t j = 0; j < to.size(); ++j) by_path.emplace(path_of(to[j]), static_cast<int64_t>(j));
  for (size_t i = 0; i < from.size(); ++i) {
    const auto it = by_path.find(absl::string_view(path_of(from[i])));
    match[i] = it == by_path.end() ? -1 : it->second;
  }
  return match;
}

// Removes leaf i for every erase[i] (true): from the map holding it, or, for a list or
// tuple item, by making it None. One pass per map touched; `leaves` is invalid afterwards.
void EraseLeaves(MutableLeaves& leaves, const std::vector<bool>& erase);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_
