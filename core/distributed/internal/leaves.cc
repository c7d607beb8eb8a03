#include "sdrt/core/distributed/internal/leaves.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

template <typename V, typename M>
class Walker {
 public:
  Walker(std::vector<LeafT<V, M>>& leaves, std::deque<std::string>& paths)
      : leaves_(leaves), paths_(paths) {}

  // `path` (the value's full path) views a top-level key or an entry of paths_.
  absl::Status Walk(V& value, absl::string_view path, M* parent, absl::string_view key,
                    size_t depth) {
    if (depth > kMaxNestingDepth) {
      return absl::InvalidArgumentError(absl::StrCat("state dict nested deeper than ",
                                                     kMaxNestingDepth, " levels at ", path));
    }
    if (value.is_map()) {
      auto& map = value.as_map();
      for (size_t i = 0; i < map.size(); ++i) {
        const std::string& k = map.key(i);
        const absl::Status s = Walk(map.value(i), Join(path, k), &map, k, depth + 1);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (value.is_sequence()) {
      auto& items = value.items();
      for (size_t i = 0; i < items.size(); ++i) {
        const absl::Status s = Walk(items[i], Join(path, absl::StrCat(i)),
                                    static_cast<M*>(nullptr), absl::string_view(), depth + 1);
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    }
    leaves_.push_back({path, &value, parent, key});
    return absl::OkStatus();
  }

 private:
  absl::string_view Join(absl::string_view path, absl::string_view item) {
    paths_.push_back(absl::StrCat(path, ".", item));
    return paths_.back();
  }

  std::vector<LeafT<V, M>>& leaves_;
  std::deque<std::string>& paths_;
};

}  // namespace

template <typename V, typename M>
absl::StatusOr<LeafList<V, M>> CollectLeavesOf(M& root) {
  LeafList<V, M> list;
  list.leaves_.reserve(root.size());
  Walker<V, M> walker(list.leaves_, list.paths_);
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string& key = root.key(i);
    const absl::Status s = walker.Walk(root.value(i), key, &root, key, 1);
    if (!s.ok()) return s;
  }
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
