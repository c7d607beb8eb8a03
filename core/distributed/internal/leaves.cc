#include "sdrt/core/distributed/internal/leaves.h"

#include <type_traits>

#include "absl/strings/str_cat.h"

namespace sdrt::internal {
namespace {

template <typename V, typename M>
absl::Status Walk(V& value, const std::string& path, M* parent, const std::string& key,
                  size_t depth, std::vector<LeafT<V, M>>* out) {
  if (depth > kMaxNestingDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat("state dict nested deeper than ", kMaxNestingDepth, " levels at ", path));
  }
  const auto join = [&path](absl::string_view item) {
    return path.empty() ? std::string(item) : absl::StrCat(path, ".", item);
  };
  if (value.is_map()) {
    auto& map = value.as_map();
    for (size_t i = 0; i < map.size(); ++i) {
      const std::string& k = map.key(i);
      const absl::Status s = Walk(map.value(i), join(k), &map, k, depth + 1, out);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (value.is_sequence()) {
    auto& items = value.items();
    for (size_t i = 0; i < items.size(); ++i) {
      const absl::Status s =
          Walk(items[i], join(absl::StrCat(i)), static_cast<M*>(nullptr), "", depth + 1, out);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  out->push_back({path, &value, parent, key});
  return absl::OkStatus();
}

template <typename V, typename M>
absl::StatusOr<std::vector<LeafT<V, M>>> CollectImpl(M& root) {
  std::vector<LeafT<V, M>> leaves;
  for (size_t i = 0; i < root.size(); ++i) {
    const absl::Status s = Walk(root.value(i), root.key(i), &root, root.key(i), 1, &leaves);
    if (!s.ok()) return s;
  }
  return leaves;
}

}  // namespace

absl::StatusOr<std::vector<Leaf>> CollectLeaves(const Map& root) {
  return CollectImpl<const Value, const Map>(root);
}

absl::StatusOr<std::vector<MutableLeaf>> CollectMutableLeaves(Map& root) {
  return CollectImpl<Value, Map>(root);
}

}  // namespace sdrt::internal
