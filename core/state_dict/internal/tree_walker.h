// The one depth-first walk of a nested state dict in sdrt: maps in insertion order, list
// and tuple items by index. IterateStateDict and ForEachTensor (core/state_dict/iterate.h),
// the flatten family (core/state_dict/flatten.h: TraverseStateDict, FlattenStateDict) and
// the leaf lists of the distributed operations (core/distributed/internal/leaves.h) all
// walk through it. The walker keeps the path from the root to the value being visited, as
// steps and in the dotted form `_flatten_state_dict` names leaves by (map keys and list
// indices joined with '.', "layers.3.weight"), and stops at kMaxNestingDepth where
// PyTorch's recursion would. Not public API.
#ifndef SDRT_CORE_STATE_DICT_INTERNAL_TREE_WALKER_H_
#define SDRT_CORE_STATE_DICT_INTERNAL_TREE_WALKER_H_

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// One step of a walk's path: a map key or a list or tuple index.
struct WalkStep {
  absl::string_view key;  // the map key (a view of the tree's own string); empty for an index
  int64_t index = -1;     // the list or tuple index; -1 for a map key
};

// Which values a walk over leaves hands to its leaf function.
enum class LeafKinds {
  // Every value that is not a map, list or tuple; an empty container has no leaf (PyTorch's
  // _traverse_state_dict).
  kValues,
  // Those and the empty maps, lists and tuples (so that a message can name every entry).
  kValuesAndEmptyContainers,
};

// The walk described at the top of this file. `V` is `const Value` for a read-only walk, or
// `Value` for one whose functions may change the values they are handed in place (not the
// maps, lists and tuples being walked). Every function below stops at the first error its
// callback returns and returns it; each returns InvalidArgument "state dict nested deeper
// than 1000 levels at <path> (...)" instead of entering a value nested deeper than
// kMaxNestingDepth. A walker is reusable: the path is empty again after each call.
template <typename V>
class TreeWalker {
 public:
  using MapType = std::conditional_t<std::is_const_v<V>, const Map, Map>;

  // Calls item(i, value) -> absl::Status for entry i of `map`, in insertion order, with the
  // path extended by its key while the call runs.
  template <typename Item>
  absl::Status EachInMap(MapType& map, Item&& item) {
    for (size_t i = 0; i < map.size(); ++i) {
      if (ABSL_PREDICT_FALSE(steps_.size() >= kMaxNestingDepth)) {
        return TooDeep(WalkStep{map.key(i)});
      }
      steps_.push_back(WalkStep{map.key(i)});
      absl::Status status = item(i, map.value(i));
      Leave();
      if (ABSL_PREDICT_FALSE(!status.ok())) return status;
    }
    return absl::OkStatus();
  }

  // The same for the items of `sequence` (a list or a tuple), the path extended by the index.
  template <typename Item>
  absl::Status EachInSequence(V& sequence, Item&& item) {
    auto& items = sequence.items();
    for (size_t i = 0; i < items.size(); ++i) {
      const WalkStep step{{}, static_cast<int64_t>(i)};
      if (ABSL_PREDICT_FALSE(steps_.size() >= kMaxNestingDepth)) return TooDeep(step);
      steps_.push_back(step);
      absl::Status status = item(i, items[i]);
      Leave();
      if (ABSL_PREDICT_FALSE(!status.ok())) return status;
    }
    return absl::OkStatus();
  }

  // Calls leaf(value, parent) -> absl::Status for each leaf of the `kinds` below `root`, depth
  // first, the path at the leaf while the call runs. `parent` is the map holding the leaf,
  // nullptr for a list or tuple item.
  template <typename Leaf>
  absl::Status EachLeaf(MapType& root, LeafKinds kinds, Leaf&& leaf) {
    return EachInMap(root, [&](size_t, V& value) { return LeavesOf(value, &root, kinds, leaf); });
  }

  // The same for the leaves at or below `value`, a value the walk has reached (the path
  // already leads to it) held by the map `parent` (nullptr: by a list or tuple).
  template <typename Leaf>
  absl::Status LeavesOf(V& value, MapType* parent, LeafKinds kinds, Leaf& leaf) {
    if (value.is_map()) {
      MapType& map = value.as_map();
      if (map.empty() && kinds == LeafKinds::kValuesAndEmptyContainers) return leaf(value, parent);
      return EachInMap(map, [&](size_t, V& item) { return LeavesOf(item, &map, kinds, leaf); });
    }
    if (value.is_sequence()) {
      if (value.items().empty() && kinds == LeafKinds::kValuesAndEmptyContainers) {
        return leaf(value, parent);
      }
      return EachInSequence(value, [&](size_t, V& item) {
        return LeavesOf(item, static_cast<MapType*>(nullptr), kinds, leaf);
      });
    }
    return leaf(value, parent);
  }

  // Runs fn() -> absl::Status with the path extended by `step` (e.g. to walk one entry of a
  // map found some other way).
  template <typename Fn>
  absl::Status At(WalkStep step, Fn&& fn) {
    if (ABSL_PREDICT_FALSE(steps_.size() >= kMaxNestingDepth)) return TooDeep(step);
    steps_.push_back(step);
    absl::Status status = fn();
    Leave();
    return status;
  }

  // The steps from the root to the value being visited (empty at the root).
  absl::Span<const WalkStep> steps() const { return steps_; }
  size_t depth() const { return steps_.size(); }

  // The dotted path ("layers.3.weight"; empty at the root), valid until the walk moves.
  // Built when asked, from the last one asked for and the steps since: a walk that never
  // asks builds no string.
  absl::string_view path() const {
    if (built_ < steps_.size()) BuildPath();
    return absl::string_view(path_.data(), built_ == 0 ? 0 : ends_[built_ - 1]);
  }

  // How many leading steps are the same as at the previous call (0 at the first), so that
  // a caller keeping its own form of the path re-makes only steps()[StepsKept(), depth()).
  size_t StepsKept() {
    const size_t kept = kept_;
    kept_ = steps_.size();
    return kept;
  }

 private:
  void Leave() {
    steps_.pop_back();
    const size_t depth = steps_.size();
    if (built_ > depth) built_ = depth;
    if (kept_ > depth) kept_ = depth;
  }

  // The error for entering `step` one level too deep.
  ABSL_ATTRIBUTE_NOINLINE absl::Status TooDeep(WalkStep step) {
    steps_.push_back(step);
    absl::Status status = absl::InvalidArgumentError(
        absl::StrCat("state dict nested deeper than ", kMaxNestingDepth, " levels at ", path(),
                     " (PyTorch stops at its recursion limit, about 1,000)"));
    Leave();
    return status;
  }

  // Appends steps_[built_, end) to the path built so far (in place: path_ is a buffer that
  // only grows).
  void BuildPath() const {
    if (ends_.size() < steps_.size()) ends_.resize(steps_.size());
    size_t end = built_ == 0 ? 0 : ends_[built_ - 1];
    for (; built_ < steps_.size(); ++built_) {
      const WalkStep& step = steps_[built_];
      // A separator, then the key or at most 20 digits.
      const size_t room = end + 1 + (step.index >= 0 ? 20 : step.key.size());
      if (path_.size() < room) path_.resize(std::max(room, 2 * path_.size()));
      char* out = path_.data() + end;
      if (built_ > 0) *out++ = '.';
      if (step.index >= 0) {
        out = std::to_chars(out, path_.data() + path_.size(), step.index).ptr;
      } else {
        out = std::copy(step.key.begin(), step.key.end(), out);
      }
      end = static_cast<size_t>(out - path_.data());
      ends_[built_] = end;
    }
  }

  std::vector<WalkStep> steps_;
  size_t kept_ = 0;  // StepsKept's count: steps unchanged since its last call
  // path() is path_[0, ends_[built_ - 1]), made of steps_[0, built_); ends_[d] is its
  // length up to step d (for d < built_).
  mutable std::string path_;
  mutable std::vector<size_t> ends_;
  mutable size_t built_ = 0;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_STATE_DICT_INTERNAL_TREE_WALKER_H_
