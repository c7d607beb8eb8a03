#include "sdrt/core/state_dict/flatten.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/internal/tree_walker.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Calls leaf(path, walk, value) -> absl::Status for every leaf of `sd` (TreeWalker's walk):
// `path` is the leaf's object path, valid during the call, and walk.path() its flatten key.
// Only the steps that changed since the last leaf are re-made, into slots that keep their
// buffers.
template <typename Leaf>
absl::Status Walk(const Map& sd, Leaf leaf) {
  internal::TreeWalker<const Value> walk;
  ObjPath path;
  return walk.EachLeaf(sd, internal::LeafKinds::kValues, [&](const Value& value, const Map*) {
    const absl::Span<const internal::WalkStep> steps = walk.steps();
    if (path.size() < steps.size()) path.resize(steps.size());
    for (size_t i = walk.StepsKept(); i < steps.size(); ++i) {
      const internal::WalkStep& step = steps[i];
      if (step.index >= 0) {
        path[i] = step.index;
      } else if (std::string* key = std::get_if<std::string>(&path[i])) {
        key->assign(step.key.data(), step.key.size());
      } else {
        path[i] = std::string(step.key);
      }
    }
    return leaf(PathSpan(path.data(), steps.size()), walk, value);
  });
}

// The prefix path[0, depth) for messages; "the root" when empty.
std::string Where(PathSpan path, size_t depth) {
  if (depth == 0) return "the root";
  return absl::StrCat("\"", PathToString(path.subspan(0, depth)), "\"");
}

absl::Status PathError(PathSpan path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("SetElement: path \"", PathToString(path), "\" (",
                                                 path.size(), " items): ", what));
}

// The index that path[depth] gives into the list or tuple `seq`: a negative one counts
// from the end, as in Python; out of range below 0 is an error (PyTorch: IndexError).
// Largest list index a path may name: padding a list to it costs index * sizeof(Value)
// bytes (176 bytes each), so 2^24 is about 3 GB. PyTorch would try, and raise MemoryError.
constexpr int64_t kMaxListIndex = int64_t{1} << 24;

absl::StatusOr<size_t> SequenceIndex(PathSpan path, size_t depth, const Value& seq) {
  const PathItem& item = path[depth];
  if (const std::string* key = std::get_if<std::string>(&item)) {
    return PathError(path,
                     absl::StrCat("the ", ValueKindName(seq.kind()), " at ", Where(path, depth),
                                  " cannot take the string key \"", *key, "\""));
  }
  const int64_t index = std::get<int64_t>(item);
  if (index > kMaxListIndex) {
    return absl::ResourceExhaustedError(
        absl::StrCat("SetElement: path \"", PathToString(path), "\": index ", index, " at ",
                     Where(path, depth), " would pad a list past ", kMaxListIndex, " entries"));
  }
  if (index >= 0) return static_cast<size_t>(index);
  const int64_t size = static_cast<int64_t>(seq.items().size());
  if (index < -size) {
    return PathError(
        path, absl::StrCat("index ", index, " is out of range for the ", ValueKindName(seq.kind()),
                           " of ", size, " items at ", Where(path, depth)));
  }
  return static_cast<size_t>(index + size);
}

absl::Status TupleError(PathSpan path, size_t depth, size_t index) {
  return PathError(path, absl::StrCat("the tuple at ", Where(path, depth),
                                      " cannot be changed at index ", index));
}

// path[depth] as a map key: the string itself, or an index in decimal.
absl::AlphaNum MapKey(const PathItem& item) {
  if (const std::string* key = std::get_if<std::string>(&item)) return absl::AlphaNum(*key);
  return absl::AlphaNum(std::get<int64_t>(item));
}

// _set_element for a sequence of paths under one root. It remembers the containers the
// last successful path went through and resumes the next path below their longest
// common proper prefix (flattened paths come in traversal order, so consecutive ones
// share all but their last items). Those containers stay where they are: a Set inserts
// only into containers at or below the depth where it resumed, which can move only
// containers below that depth, and the walk recomputes those.
class ElementSetter {
 public:
  explicit ElementSetter(Map& root);
  // _set_element(root, path, value). The items of `path` must outlive the next call.
  absl::Status Set(PathSpan path, Value value);

 private:
  // A dict, or a list or tuple (exactly one is set).
  struct Container {
    Map* map;
    Value* seq;
  };
  PathSpan previous_;                  // the last path set successfully (empty: none)
  std::vector<Container> containers_;  // [d]: the container path[0, d) reaches
};

ElementSetter::ElementSetter(Map& root) : containers_(1, Container{&root, nullptr}) {}

absl::Status ElementSetter::Set(PathSpan path, Value value) {
  const PathSpan previous = previous_;
  previous_ = PathSpan();  // set again only on success
  if (path.empty()) return absl::InvalidArgumentError("SetElement: empty path");
  // Resume below the longest common proper prefix with the previous path.
  size_t depth = 0;
  if (!previous.empty()) {
    const size_t limit = std::min(previous.size(), path.size()) - 1;
    while (depth < limit && previous[depth] == path[depth]) ++depth;
  }
  containers_.resize(path.size());
  Map* map = containers_[depth].map;
  Value* seq = containers_[depth].seq;
  for (; depth + 1 < path.size(); ++depth) {
    const bool next_is_key = std::holds_alternative<std::string>(path[depth + 1]);
    Value* child;
    if (map != nullptr) {
      const absl::AlphaNum key = MapKey(path[depth]);
      child = map->Find(key.Piece());
      if (child == nullptr) {
        map->Set(std::string(key.Piece()), next_is_key ? Value(Map{}) : Value(List{}));
        child = &map->value(map->size() - 1);
      }
    } else {
      SDRT_ASSIGN_OR_RETURN(size_t index, SequenceIndex(path, depth, *seq));
      std::vector<Value>& items = seq->items();
      if (index >= items.size() || items[index].is_none()) {
        if (seq->is_tuple()) return TupleError(path, depth, index);
        if (index >= items.size()) items.resize(index + 1);
        items[index] = next_is_key ? Value(Map{}) : Value(List{});
      }
      child = &items[index];
    }
    map = child->is_map() ? &child->as_map() : nullptr;
    seq = child->is_sequence() ? child : nullptr;
    if (map == nullptr && seq == nullptr) {
      return PathError(path,
                       absl::StrCat("the value at ", Where(path, depth + 1), " is a ",
                                    ValueKindName(child->kind()), ", not a dict, list or tuple"));
    }
    containers_[depth + 1] = Container{map, seq};
  }

  const size_t last = path.size() - 1;
  if (map != nullptr) {
    if (const int64_t* index = std::get_if<int64_t>(&path[last])) {
      if (*index >= static_cast<int64_t>(map->size())) {
        return PathError(path, absl::StrCat("the dict at ", Where(path, last), " has ", map->size(),
                                            " entries, too few to take index ", *index,
                                            " (PyTorch pads it like a list and "
                                            "raises AttributeError)"));
      }
      map->Set(absl::StrCat(*index), std::move(value));
    } else {
      map->Set(std::get<std::string>(path[last]), std::move(value));
    }
  } else {
    SDRT_ASSIGN_OR_RETURN(size_t index, SequenceIndex(path, last, *seq));
    if (seq->is_tuple()) return TupleError(path, last, index);
    std::vector<Value>& items = seq->items();
    if (index >= items.size()) items.resize(index + 1);
    items[index] = std::move(value);
  }
  previous_ = path;
  return absl::OkStatus();
}

}  // namespace

std::string PathToString(PathSpan path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i > 0) out.push_back('.');
    if (const std::string* key = std::get_if<std::string>(&path[i])) {
      out.append(*key);
    } else {
      absl::StrAppend(&out, std::get<int64_t>(path[i]));
    }
  }
  return out;
}

absl::string_view FlattenMapping::Keys::Get(size_t i) const {
  const size_t begin = i == 0 ? 0 : ends[i - 1];
  return absl::string_view(chars.data() + begin, ends[i] - begin);
}

size_t FlattenMapping::KeyHash::operator()(size_t i) const { return (*this)(keys->Get(i)); }

size_t FlattenMapping::KeyHash::operator()(absl::string_view key) const {
  return absl::Hash<absl::string_view>()(key);
}

FlattenMapping::FlattenMapping() { Reset(); }

FlattenMapping::FlattenMapping(const FlattenMapping& other) { *this = other; }

FlattenMapping& FlattenMapping::operator=(const FlattenMapping& other) {
  if (this == &other) return *this;
  Reset();
  if (other.keys_ == nullptr) return *this;  // moved-from: empty
  *keys_ = *other.keys_;
  items_ = other.items_;
  path_ends_ = other.path_ends_;
  index_.reserve(path_ends_.size());
  for (size_t i = 0; i < path_ends_.size(); ++i) index_.insert(i);
  return *this;
}

void FlattenMapping::Reset() {
  keys_ = std::make_unique<Keys>();
  items_.clear();
  path_ends_.clear();
  index_ = absl::flat_hash_set<size_t, KeyHash, KeyEq>(0, KeyHash{keys_.get()}, KeyEq{keys_.get()});
}

bool FlattenMapping::Insert(absl::string_view key, PathSpan path) {
  if (keys_ == nullptr) Reset();
  // Append the key first: the index hashes a position through the key it names.
  const size_t i = path_ends_.size();
  keys_->chars.append(key.data(), key.size());
  keys_->ends.push_back(keys_->chars.size());
  if (!index_.insert(i).second) {
    keys_->ends.pop_back();
    keys_->chars.resize(keys_->chars.size() - key.size());
    return false;
  }
  items_.insert(items_.end(), path.begin(), path.end());
  path_ends_.push_back(items_.size());
  return true;
}

void FlattenMapping::Reserve(size_t entries, size_t key_chars, size_t path_items) {
  if (keys_ == nullptr) Reset();
  keys_->chars.reserve(key_chars);
  keys_->ends.reserve(entries);
  items_.reserve(path_items);
  path_ends_.reserve(entries);
  index_.reserve(entries);
}

std::optional<PathSpan> FlattenMapping::Find(absl::string_view key) const {
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  return path(*it);
}

PathSpan FlattenMapping::path(size_t i) const {
  const size_t begin = i == 0 ? 0 : path_ends_[i - 1];
  return PathSpan(items_.data() + begin, path_ends_[i] - begin);
}

absl::Status TraverseStateDict(const Map& sd,
                               const std::function<absl::Status(PathSpan, const Value&)>& visitor) {
  return Walk(sd, [&visitor](PathSpan path, const internal::TreeWalker<const Value>&,
                             const Value& leaf) { return visitor(path, leaf); });
}

absl::StatusOr<FlatStateDict> FlattenStateDict(const Map& sd) {
  // A first walk sizes the mapping's buffers; it costs a fraction of the second.
  size_t leaves = 0, key_chars = 0, path_items = 0;
  (void)Walk(sd, [&](PathSpan path, const internal::TreeWalker<const Value>& walk, const Value&) {
    ++leaves;
    key_chars += walk.path().size();
    path_items += path.size();
    return absl::OkStatus();
  });
  FlatStateDict out;
  out.mapping.Reserve(leaves, key_chars, path_items);
  out.flat.Reserve(leaves);
  const auto add = [&out](PathSpan path, const internal::TreeWalker<const Value>& walk,
                          const Value& leaf) {
    const absl::string_view key = walk.path();
    if (!out.mapping.Insert(key, path)) {
      return absl::InvalidArgumentError(absl::StrCat("duplicated flatten key ", key));
    }
    out.flat.Set(std::string(key), leaf);
    return absl::OkStatus();
  };
  SDRT_RETURN_IF_ERROR(Walk(sd, add));
  return out;
}

absl::Status SetElement(Map& root, PathSpan path, Value value) {
  return ElementSetter(root).Set(path, std::move(value));
}

absl::StatusOr<Map> UnflattenStateDict(const Map& flat, const FlattenMapping& mapping) {
  Map nested;
  ElementSetter setter(nested);
  for (size_t i = 0; i < flat.size(); ++i) {
    const std::string& key = flat.key(i);
    // Fast path: a mapping made by FlattenStateDict lists the keys in the same order.
    const std::optional<PathSpan> path =
        i < mapping.size() && mapping.key(i) == key ? mapping.path(i) : mapping.Find(key);
    if (!path.has_value()) {
      return absl::NotFoundError(absl::StrCat("unflatten: key \"", key,
                                              "\" of the flat state dict is not in the "
                                              "mapping"));
    }
    SDRT_RETURN_IF_ERROR(setter.Set(*path, flat.value(i)));
  }
  return nested;
}

}  // namespace sdrt
