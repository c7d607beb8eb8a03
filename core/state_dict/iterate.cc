// The iteration engine (core/state_dict/iterate.h), mirroring `_iterate_state_dict`.
//
// The current path is a stack of segments (a key view or a list index) turned into a
// string only when an error is reported, so a walk costs no string building.
#include "sdrt/core/state_dict/iterate.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Marks a Status as a companion mismatch (the payload holds the bare description).
constexpr absl::string_view kMismatchPayloadUrl = "sdrt/companion-mismatch";
constexpr absl::string_view kMismatchPrefix = "companion mismatch";
// How many flattened names a mismatch message lists before "and N more".
constexpr size_t kMaxNamesListed = 10;

struct Segment {
  absl::string_view key;  // a map key, or empty with index >= 0
  int64_t index = -1;     // a list/tuple index
};

std::string JoinPath(const std::vector<Segment>& path) {
  if (path.empty()) return "<root>";
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (i > 0) out.push_back('.');
    if (path[i].index >= 0) {
      absl::StrAppend(&out, path[i].index);
    } else {
      out.append(path[i].key.data(), path[i].key.size());
    }
  }
  return out;
}

absl::Status MismatchAt(absl::string_view path, absl::string_view what) {
  absl::Status status =
      absl::InvalidArgumentError(absl::StrCat(kMismatchPrefix, " at ", path, ": ", what));
  status.SetPayload(kMismatchPayloadUrl, absl::Cord(what));
  return status;
}

// Appends the flattened names of every leaf under `value` (an empty map or list counts
// as a leaf, so that it is named too) to `names`, up to kMaxNamesListed; counts all.
void CollectLeafNames(const Value& value, const std::string& name, std::vector<std::string>* names,
                      size_t* total) {
  const auto child = [&](const std::string& part) {
    return name.empty() ? part : absl::StrCat(name, ".", part);
  };
  if (value.is_map() && !value.as_map().empty()) {
    const Map& map = value.as_map();
    for (size_t i = 0; i < map.size(); ++i)
      CollectLeafNames(map.value(i), child(map.key(i)), names, total);
    return;
  }
  if (value.is_sequence() && !value.items().empty()) {
    for (size_t i = 0; i < value.items().size(); ++i) {
      CollectLeafNames(value.items()[i], child(absl::StrCat(i)), names, total);
    }
    return;
  }
  ++*total;
  if (names->size() < kMaxNamesListed) names->push_back(name);
}

std::string NameList(const std::vector<std::string>& names, size_t total) {
  std::string out = absl::StrCat("[", absl::StrJoin(names, ", "));
  if (total > names.size()) absl::StrAppend(&out, ", and ", total - names.size(), " more");
  out.push_back(']');
  return out;
}

std::string KindWithArticle(const Value& value) {
  if (value.is_none()) return "None";
  const absl::string_view name = ValueKindName(value.kind());
  const bool vowel = absl::string_view("aeiou").find(name.front()) != absl::string_view::npos;
  return absl::StrCat(vowel ? "an " : "a ", name);
}

std::string TensorsDiffer(const Tensor& source, const Tensor& companion) {
  return absl::StrCat("source ", DTypeName(source.dtype()), ShapeToString(source.shape()),
                      ", companion ", DTypeName(companion.dtype()),
                      ShapeToString(companion.shape()));
}

class Engine {
 public:
  Engine(const IterateVisitors& visitors, const IterateOptions& options)
      : visitors_(visitors),
        options_(options),
        included_(options.ranks_only.empty() ||
                  std::find(options.ranks_only.begin(), options.ranks_only.end(), options.rank) !=
                      options.ranks_only.end()) {}

  // The top level: a map, whose companion (if any) is a map.
  absl::StatusOr<Map> VisitTop(const Map& obj, const Map* companion) {
    SDRT_ASSIGN_OR_RETURN(Map ret, TransformMap(obj, companion));
    if (!included_) return Map{};
    return ret;
  }

  absl::StatusOr<Value> Visit(const Value& obj, const Value* companion) {
    if (path_.size() > kMaxNestingDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("state dict nested deeper than ", kMaxNestingDepth, " levels at ",
                       JoinPath(path_), " (PyTorch stops at its recursion limit, about 1,000)"));
    }
    if (companion != nullptr && companion->is_none()) companion = nullptr;
    SDRT_ASSIGN_OR_RETURN(Value ret, Transform(obj, companion));
    if (!included_) return ret.is_map() ? Value(Map{}) : Value();
    if (!ret.is_any_tensor()) return ret;
    if (companion == nullptr) {
      if (!options_.cpu_offload) return ret;
      return WithPath(MoveToCpu(ret));
    }
    return IntoCompanion(std::move(ret), *companion);
  }

 private:
  absl::StatusOr<Value> Transform(const Value& obj, const Value* companion) {
    switch (obj.kind()) {
      case ValueKind::kShardedTensor:
        return WithPath(visitors_.sharded(obj.as_sharded(), companion));
      case ValueKind::kDTensor:
        return WithPath(visitors_.dtensor(obj.as_dtensor(), companion));
      case ValueKind::kTensor:
        return WithPath(visitors_.tensor(obj.as_tensor(), companion));
      case ValueKind::kMap: {
        if (companion != nullptr && !companion->is_map()) {
          return MismatchAt(JoinPath(path_), KindsDiffer(obj, *companion));
        }
        SDRT_ASSIGN_OR_RETURN(
            Map map,
            TransformMap(obj.as_map(), companion != nullptr ? &companion->as_map() : nullptr));
        return Value(std::move(map));
      }
      case ValueKind::kList:
      case ValueKind::kTuple:
        return TransformSequence(obj, companion);
      case ValueKind::kOpaque:
        return TransformOpaque(obj.as_opaque());
      default:
        return obj;
    }
  }

  absl::StatusOr<Map> TransformMap(const Map& map, const Map* companion) {
    if (companion != nullptr) {
      SDRT_RETURN_IF_ERROR(CheckKeys(map, *companion));
    }
    Map out;
    out.Reserve(map.size());
    for (size_t i = 0; i < map.size(); ++i) {
      path_.push_back(Segment{map.key(i)});
      absl::StatusOr<Value> item =
          Visit(map.value(i), companion != nullptr ? companion->Find(map.key(i)) : nullptr);
      path_.pop_back();
      if (!item.ok()) return item.status();
      out.Set(map.key(i), *std::move(item));
    }
    return out;
  }

  absl::StatusOr<Value> TransformSequence(const Value& obj, const Value* companion) {
    const std::vector<Value>& items = obj.items();
    if (companion != nullptr) {
      if (!companion->is_sequence()) {
        return MismatchAt(JoinPath(path_), KindsDiffer(obj, *companion));
      }
      if (companion->items().size() != items.size()) return LengthMismatch(obj, *companion);
    }
    std::vector<Value> out;
    out.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      path_.push_back(Segment{{}, static_cast<int64_t>(i)});
      absl::StatusOr<Value> item =
          Visit(items[i], companion != nullptr ? &companion->items()[i] : nullptr);
      path_.pop_back();
      if (!item.ok()) return item;
      out.push_back(*std::move(item));
    }
    if (obj.is_tuple()) return Value(Tuple(std::move(out)));
    return Value(List(std::move(out)));
  }

  absl::StatusOr<Value> TransformOpaque(const Opaque& opaque) {
    if (opaque.type_name == kBytesIOTypeName) return Value(opaque);
    if (options_.type_check) {
      return absl::InvalidArgumentError(absl::StrCat("IterateStateDict: unexpected value type '",
                                                     opaque.type_name, "' at ", JoinPath(path_),
                                                     " (type_check is on)"));
    }
    if (!opaque.clone) {
      return absl::FailedPreconditionError(absl::StrCat("IterateStateDict: object of type '",
                                                        opaque.type_name, "' at ", JoinPath(path_),
                                                        " has no clone function to copy it with"));
    }
    return Value(opaque.clone(opaque));
  }

  absl::Status CheckKeys(const Map& source, const Map& companion) const {
    const std::string here = path_.empty() ? "" : JoinPath(path_);
    const auto name = [&](const std::string& key) {
      return here.empty() ? key : absl::StrCat(here, ".", key);
    };
    std::vector<std::string> missing;
    std::vector<std::string> added;
    size_t missing_total = 0;
    size_t added_total = 0;
    for (size_t i = 0; i < source.size(); ++i) {
      if (!companion.contains(source.key(i))) {
        CollectLeafNames(source.value(i), name(source.key(i)), &missing, &missing_total);
      }
    }
    for (size_t i = 0; i < companion.size(); ++i) {
      if (!source.contains(companion.key(i))) {
        CollectLeafNames(companion.value(i), name(companion.key(i)), &added, &added_total);
      }
    }
    if (missing_total == 0 && added_total == 0) return absl::OkStatus();
    std::string what = "keys differ";
    if (missing_total > 0)
      absl::StrAppend(&what, "; missing from companion: ", NameList(missing, missing_total));
    if (added_total > 0)
      absl::StrAppend(&what, "; only in companion: ", NameList(added, added_total));
    return MismatchAt(JoinPath(path_), what);
  }

  absl::Status LengthMismatch(const Value& source, const Value& companion) const {
    const std::string here = path_.empty() ? "" : JoinPath(path_);
    const Value& longer = source.items().size() > companion.items().size() ? source : companion;
    const size_t shorter = std::min(source.items().size(), companion.items().size());
    std::vector<std::string> names;
    size_t total = 0;
    for (size_t i = shorter; i < longer.items().size(); ++i) {
      const std::string index = absl::StrCat(i);
      CollectLeafNames(longer.items()[i], here.empty() ? index : absl::StrCat(here, ".", index),
                       &names, &total);
    }
    return MismatchAt(
        JoinPath(path_),
        absl::StrCat("source ", ValueKindName(source.kind()), " has ", source.items().size(),
                     " items, companion ", ValueKindName(companion.kind()), " has ",
                     companion.items().size(),
                     &longer == &source ? "; missing from companion: " : "; only in companion: ",
                     NameList(names, total)));
  }

  // Step B with a companion: kinds must agree and every tensor must be copyable into its
  // counterpart; with copy_into_companion, copy and return the companion.
  absl::StatusOr<Value> IntoCompanion(Value ret, const Value& companion) {
    if (ret.kind() != companion.kind()) {
      return MismatchAt(JoinPath(path_), KindsDiffer(ret, companion));
    }
    switch (ret.kind()) {
      case ValueKind::kTensor: {
        SDRT_RETURN_IF_ERROR(CopyInto(companion.as_tensor(), ret.as_tensor()));
        break;
      }
      case ValueKind::kDTensor: {
        SDRT_RETURN_IF_ERROR(CopyInto(companion.as_dtensor().local(), ret.as_dtensor().local()));
        break;
      }
      default: {
        const std::vector<LocalShard>& dst = companion.as_sharded().local_shards();
        const std::vector<LocalShard>& src = ret.as_sharded().local_shards();
        if (dst.size() != src.size()) {
          return MismatchAt(JoinPath(path_),
                            absl::StrCat("source ShardedTensor has ", src.size(),
                                         " local shards, companion has ", dst.size()));
        }
        for (size_t i = 0; i < dst.size(); ++i) {
          SDRT_RETURN_IF_ERROR(CopyInto(dst[i].tensor, src[i].tensor));
        }
        break;
      }
    }
    return options_.copy_into_companion ? companion : ret;
  }

  absl::Status CopyInto(Tensor dst, const Tensor& src) {
    if (dst.shape() != src.shape() || dst.dtype() != src.dtype()) {
      return MismatchAt(JoinPath(path_), TensorsDiffer(src, dst));
    }
    if (!options_.copy_into_companion) return absl::OkStatus();
    return WithPath(dst.CopyFrom(src, options_.non_blocking, options_.stream));
  }

  // Adds the current path to a visitor's or a copy's error.
  absl::Status WithPath(const absl::Status& status) const {
    if (status.ok()) return status;
    const std::string path = JoinPath(path_);
    if (auto what = status.GetPayload(kMismatchPayloadUrl)) {
      return MismatchAt(path, std::string(*what));
    }
    return absl::Status(status.code(), absl::StrCat(status.message(), " (at ", path, ")"));
  }
  absl::StatusOr<Value> WithPath(absl::StatusOr<Value> result) const {
    if (result.ok()) return result;
    return WithPath(result.status());
  }

  const IterateVisitors& visitors_;
  const IterateOptions& options_;
  const bool included_;
  std::vector<Segment> path_;
};

}  // namespace

IterateVisitors IdentityVisitors() {
  return IterateVisitors{
      [](const ShardedTensor& st, const Value*) -> absl::StatusOr<Value> { return Value(st); },
      [](const DTensor& dt, const Value*) -> absl::StatusOr<Value> { return Value(dt); },
      [](const Tensor& t, const Value*) -> absl::StatusOr<Value> { return Value(t); },
  };
}

absl::StatusOr<Map> IterateStateDict(const Map& obj, const IterateVisitors& visitors,
                                     const Map* companion, const IterateOptions& options) {
  return Engine(visitors, options).VisitTop(obj, companion);
}

absl::Status CompanionMismatch(absl::string_view what) {
  absl::Status status = absl::InvalidArgumentError(absl::StrCat(kMismatchPrefix, ": ", what));
  status.SetPayload(kMismatchPayloadUrl, absl::Cord(what));
  return status;
}

bool IsCompanionMismatch(const absl::Status& status) {
  return status.GetPayload(kMismatchPayloadUrl).has_value();
}

std::string KindsDiffer(const Value& source, const Value& companion) {
  return absl::StrCat("source is ", KindWithArticle(source), ", companion is ",
                      KindWithArticle(companion));
}

}  // namespace sdrt::internal
