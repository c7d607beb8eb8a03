#include "sdrt/core/distributed/internal/leaves.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "sdrt/core/state_dict/internal/tree_walker.h"

namespace sdrt::internal {

template <typename V, typename M>
absl::StatusOr<LeafList<V, M>> CollectLeavesOf(M& root) {
  LeafList<V, M> list;
  list.leaves_.reserve(root.size());
  TreeWalker<V> walk;
  const absl::Status status = walk.EachLeaf(root, LeafKinds::kValues, [&](V& value, M* parent) {
    // A leaf of the top-level map is named by its key, the tree's own string.
    const absl::string_view key = walk.steps().back().key;
    absl::string_view path = key;
    if (walk.depth() > 1) path = list.paths_.emplace_back(walk.path());
    list.leaves_.push_back({path, &value, parent, key});
    return absl::OkStatus();
  });
  if (!status.ok()) return status;
  return list;
}

absl::StatusOr<Leaves> CollectLeaves(const Map& root) {
  return CollectLeavesOf<const Value, const Map>(root);
}

absl::StatusOr<MutableLeaves> CollectMutableLeaves(Map& root) {
  return CollectLeavesOf<Value, Map>(root);
}

void EraseLeaves(MutableLeaves& leaves, const std::vector<bool>& erase) {
  absl::flat_hash_map<Map*, absl::flat_hash_set<const Value*>> by_map;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!erase[i]) continue;
    if (leaves[i].parent_map == nullptr) {
      *leaves[i].value = Value(None{});
    } else {
      by_map[leaves[i].parent_map].insert(leaves[i].value);
    }
  }
  for (auto& entry : by_map) {
    const absl::flat_hash_set<const Value*>& values = entry.second;
    entry.first->EraseIf(
        [&values](const std::string&, const Value& v) { return values.contains(&v); });
  }
}

}  // namespace sdrt::internal
