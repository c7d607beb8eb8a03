// The iteration engine (core/state_dict/iterate.h), mirroring `_iterate_state_dict`, on
// TreeWalker's walk.
#include "sdrt/core/state_dict/iterate.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/state_dict/internal/tree_walker.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Marks a Status as a companion mismatch (the payload holds the bare description).
constexpr absl::string_view kMismatchPayloadUrl = "sdrt/companion-mismatch";
constexpr absl::string_view kMismatchPrefix = "companion mismatch";
// How many flattened names a mismatch message lists before "and N more".
constexpr size_t kMaxNamesListed = 10;

absl::Status MismatchAt(absl::string_view path, absl::string_view what) {
  absl::Status status =
      absl::InvalidArgumentError(absl::StrCat(kMismatchPrefix, " at ", path, ": ", what));
  status.SetPayload(kMismatchPayloadUrl, absl::Cord(what));
  return status;
}

// The flattened names of entries a mismatch message lists: up to kMaxNamesListed of them,
// and how many there are in all.
struct NameList {
  std::vector<std::string> names;
  size_t total = 0;

  // Adds the leaves at or below `value`, the value at `walk`'s path (an empty map or list
  // counts as a leaf, so that it is named too).
  absl::Status Add(TreeWalker<const Value>& walk, const Value& value) {
    const auto note = [&](const Value&, const Map*) {
      if (names.size() < kMaxNamesListed) names.emplace_back(walk.path());
      ++total;
      return absl::OkStatus();
    };
    return walk.LeavesOf(value, nullptr, LeafKinds::kValuesAndEmptyContainers, note);
  }

  std::string ToString() const {
    std::string out = absl::StrCat("[", absl::StrJoin(names, ", "));
    if (total > names.size()) absl::StrAppend(&out, ", and ", total - names.size(), " more");
    out.push_back(']');
    return out;
  }
};

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
          return MismatchAt(Where(), KindsDiffer(obj, *companion));
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
    SDRT_RETURN_IF_ERROR(walk_.EachInMap(map, [&](size_t i, const Value& value) -> absl::Status {
      absl::StatusOr<Value> item =
          Visit(value, companion != nullptr ? companion->Find(map.key(i)) : nullptr);
      if (!item.ok()) return item.status();
      out.Set(map.key(i), *std::move(item));
      return absl::OkStatus();
    }));
    return out;
  }

  absl::StatusOr<Value> TransformSequence(const Value& obj, const Value* companion) {
    const std::vector<Value>& items = obj.items();
    if (companion != nullptr) {
      if (!companion->is_sequence()) {
        return MismatchAt(Where(), KindsDiffer(obj, *companion));
      }
      if (companion->items().size() != items.size()) return LengthMismatch(obj, *companion);
    }
    std::vector<Value> out;
    out.reserve(items.size());
    SDRT_RETURN_IF_ERROR(
        walk_.EachInSequence(obj, [&](size_t i, const Value& value) -> absl::Status {
          absl::StatusOr<Value> item =
              Visit(value, companion != nullptr ? &companion->items()[i] : nullptr);
          if (!item.ok()) return item.status();
          out.push_back(*std::move(item));
          return absl::OkStatus();
        }));
    if (obj.is_tuple()) return Value(Tuple(std::move(out)));
    return Value(List(std::move(out)));
  }

  absl::StatusOr<Value> TransformOpaque(const Opaque& opaque) {
    if (opaque.type_name == kBytesIOTypeName) return Value(opaque);
    if (options_.type_check) {
      return absl::InvalidArgumentError(absl::StrCat("IterateStateDict: unexpected value type '",
                                                     opaque.type_name, "' at ", Where(),
                                                     " (type_check is on)"));
    }
    if (!opaque.clone) {
      return absl::FailedPreconditionError(absl::StrCat("IterateStateDict: object of type '",
                                                        opaque.type_name, "' at ", Where(),
                                                        " has no clone function to copy it with"));
    }
    return Value(opaque.clone(opaque));
  }

  // The entries of `map` whose keys `other` lacks, named.
  absl::StatusOr<NameList> KeysOnlyIn(const Map& map, const Map& other) {
    NameList list;
    for (size_t i = 0; i < map.size(); ++i) {
      if (other.contains(map.key(i))) continue;
      SDRT_RETURN_IF_ERROR(
          walk_.At(WalkStep{map.key(i)}, [&] { return list.Add(walk_, map.value(i)); }));
    }
    return list;
  }

  absl::Status CheckKeys(const Map& source, const Map& companion) {
    SDRT_ASSIGN_OR_RETURN(const NameList missing, KeysOnlyIn(source, companion));
    SDRT_ASSIGN_OR_RETURN(const NameList added, KeysOnlyIn(companion, source));
    if (missing.total == 0 && added.total == 0) return absl::OkStatus();
    std::string what = "keys differ";
    if (missing.total > 0) {
      absl::StrAppend(&what, "; missing from companion: ", missing.ToString());
    }
    if (added.total > 0) absl::StrAppend(&what, "; only in companion: ", added.ToString());
    return MismatchAt(Where(), what);
  }

  absl::Status LengthMismatch(const Value& source, const Value& companion) {
    const Value& longer = source.items().size() > companion.items().size() ? source : companion;
    const size_t shorter = std::min(source.items().size(), companion.items().size());
    NameList extra;
    for (size_t i = shorter; i < longer.items().size(); ++i) {
      SDRT_RETURN_IF_ERROR(walk_.At(WalkStep{{}, static_cast<int64_t>(i)},
                                    [&] { return extra.Add(walk_, longer.items()[i]); }));
    }
    return MismatchAt(
        Where(),
        absl::StrCat("source ", ValueKindName(source.kind()), " has ", source.items().size(),
                     " items, companion ", ValueKindName(companion.kind()), " has ",
                     companion.items().size(),
                     &longer == &source ? "; missing from companion: " : "; only in companion: ",
                     extra.ToString()));
  }

  // Step B with a companion: kinds must agree and every tensor must be copyable into its
  // counterpart; with copy_into_companion, copy and return the companion.
  absl::StatusOr<Value> IntoCompanion(Value ret, const Value& companion) {
    if (ret.kind() != companion.kind()) {
      return MismatchAt(Where(), KindsDiffer(ret, companion));
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
          return MismatchAt(Where(), absl::StrCat("source ShardedTensor has ", src.size(),
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
      return MismatchAt(Where(), TensorsDiffer(src, dst));
    }
    if (!options_.copy_into_companion) return absl::OkStatus();
    return WithPath(dst.CopyFrom(src, options_.non_blocking, options_.stream));
  }

  // The current path for messages: "<root>" at the root.
  std::string Where() const {
    return walk_.depth() == 0 ? std::string("<root>") : std::string(walk_.path());
  }

  // Adds the current path to a visitor's or a copy's error.
  absl::Status WithPath(const absl::Status& status) const {
    if (status.ok()) return status;
    const std::string path = Where();
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
  TreeWalker<const Value> walk_;
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
