// The leaves of a state dict in walk order (depth first, map insertion order, list items
// by index), each with its dotted path and where it sits, for the distributed operations
// that plan all their collectives before moving data. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// A leaf: any value that is not a map, list or tuple (empty containers have no leaves).
// `value` points into the walked tree; `parent_map` is the map holding it (nullptr when a
// list or tuple item) under `key`. Pointers stay valid while the tree's structure is not
// changed.
template <typename V, typename M>
struct LeafT {
  std::string path;  // "layers.0.weight": keys and indices joined by '.'
  V* value = nullptr;
  M* parent_map = nullptr;
  std::string key;
};
using Leaf = LeafT<const Value, const Map>;
using MutableLeaf = LeafT<Value, Map>;

// InvalidArgument naming the path when nesting exceeds kMaxNestingDepth.
absl::StatusOr<std::vector<Leaf>> CollectLeaves(const Map& root);
absl::StatusOr<std::vector<MutableLeaf>> CollectMutableLeaves(Map& root);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LEAVES_H_
