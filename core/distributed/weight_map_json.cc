// WeightMap::FromJson (core/distributed/weight_map.h): a map file's rules, each field
// checked for its type before FromRules checks their values.
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/internal/strict_json.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using Json = nlohmann::ordered_json;

constexpr size_t kMaxMapBytes = size_t{1} << 20;

absl::Status Bad(size_t index, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("weight map rule ", index, ": ", what));
}

// A string, or (when `many`) an array of strings, into `out`.
absl::Status Strings(size_t index, const char* key, const Json& value, bool many,
                     std::vector<std::string>& out) {
  if (value.is_string() && !many) {
    out.push_back(value.get<std::string>());
    return absl::OkStatus();
  }
  if (!many || !value.is_array()) {
    return Bad(index, absl::StrCat("\"", key, "\" must be ",
                                   many ? "an array of strings" : "a string"));
  }
  for (const Json& item : value) {
    if (!item.is_string()) {
      return Bad(index, absl::StrCat("\"", key, "\" must be an array of strings"));
    }
    out.push_back(item.get<std::string>());
  }
  return absl::OkStatus();
}

absl::Status Integer(size_t index, const char* key, const Json& value, int64_t& out) {
  if (!value.is_number_integer()) {
    return Bad(index, absl::StrCat("\"", key, "\" must be an integer"));
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > (uint64_t{1} << 62)) {
    return Bad(index, absl::StrCat("\"", key, "\" is out of range"));
  }
  out = value.get<int64_t>();
  return absl::OkStatus();
}

absl::StatusOr<WeightMapRule> RuleOf(size_t index, const Json& j) {
  if (!j.is_object()) return Bad(index, "not an object");
  using Kind = WeightMapRule::Kind;
  WeightMapRule rule;
  int kinds = 0;
  for (const auto& [key, value] : j.items()) {
    if (key == "rename" || key == "fuse" || key == "split" || key == "pad" ||
        key == "regroup") {
      ++kinds;
      rule.kind = key == "rename"  ? Kind::kRename
                  : key == "fuse"  ? Kind::kFuse
                  : key == "split" ? Kind::kSplit
                  : key == "pad"   ? Kind::kPad
                                   : Kind::kRegroup;
      SDRT_RETURN_IF_ERROR(Strings(index, key.c_str(), value, rule.kind == Kind::kFuse, rule.from));
    } else if (key == "to") {
      SDRT_RETURN_IF_ERROR(Strings(index, "to", value, value.is_array(), rule.to));
    } else if (key == "interleave" || key == "from_interleave") {
      WeightMapRule::Interleave& out =
          key == "interleave" ? rule.interleave : rule.source_interleave;
      if (value == "shards") {
        out = WeightMapRule::Interleave::kShards;
      } else if (value == "groups") {
        out = WeightMapRule::Interleave::kGroups;
      } else {
        return Bad(index, absl::StrCat("\"", key, "\" must be \"shards\" or \"groups\""));
      }
    } else if (key == "sizes") {
      if (!value.is_array() || value.size() > 16) {
        return Bad(index, "\"sizes\" must be an array of at most 16 integers");
      }
      for (const Json& item : value) {
        SDRT_RETURN_IF_ERROR(Integer(index, "sizes", item, rule.sizes.emplace_back()));
      }
    } else if (key == "dim") {
      int64_t dim = 0;
      SDRT_RETURN_IF_ERROR(Integer(index, "dim", value, dim));
      // FromRules refuses what lies outside [0, 12), naming the value given.
      if (dim < std::numeric_limits<int>::min() || dim > std::numeric_limits<int>::max()) {
        return Bad(index, absl::StrCat("\"dim\" ", dim, " not in [0, 12)"));
      }
      rule.dim = static_cast<int>(dim);
    } else if (key == "head_size") {
      SDRT_RETURN_IF_ERROR(Integer(index, "head_size", value, rule.head_size));
    } else if (key == "groups") {
      SDRT_RETURN_IF_ERROR(Integer(index, "groups", value, rule.groups));
    } else if (key == "multiple") {
      SDRT_RETURN_IF_ERROR(Integer(index, "multiple", value, rule.multiple));
    } else {
      return Bad(index, absl::StrCat("unknown key \"", key, "\""));
    }
  }
  if (kinds != 1) {
    return Bad(index,
               "needs exactly one of \"rename\", \"fuse\", \"split\", \"pad\", \"regroup\"");
  }
  return rule;
}

}  // namespace

absl::StatusOr<WeightMap> WeightMap::FromJson(absl::string_view text) {
  if (text.size() > kMaxMapBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight map: ", text.size(), " bytes of JSON; at most 1 MiB"));
  }
  absl::StatusOr<Json> j = internal::ParseStrictJson(text);
  if (!j.ok()) return absl::InvalidArgumentError(absl::StrCat("weight map: ", j.status().message()));
  if (!j->is_object() || j->size() != 1 || !j->contains("rules") || !(*j)["rules"].is_array()) {
    return absl::InvalidArgumentError(
        "weight map: the document must be {\"rules\": [...]} and nothing else");
  }
  std::vector<WeightMapRule> rules;
  const Json& list = (*j)["rules"];
  for (size_t i = 0; i < list.size(); ++i) {
    SDRT_ASSIGN_OR_RETURN(WeightMapRule rule, RuleOf(i, list[i]));
    rules.push_back(std::move(rule));
  }
  return FromRules(std::move(rules));
}

}  // namespace sdrt
