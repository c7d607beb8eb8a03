// A WeightMap's compiled form (core/distributed/weight_map.h): each rule's patterns as RE2
// objects and its templates as pieces, and the match of one source name. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_COMPILED_MAP_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_COMPILED_MAP_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "re2/re2.h"
#include "sdrt/core/distributed/weight_map.h"

namespace sdrt {

struct WeightMap::Compiled {
  // A template: literal text and capture groups (by number) in turn.
  struct Piece {
    std::string literal;
    int group = -1;  // >= 1: the group's text; -1: `literal`
  };
  using Template = std::vector<Piece>;
  struct Rule {
    std::vector<std::unique_ptr<RE2>> patterns;  // one per WeightMapRule::from
    // Per pattern, its parse of each WeightMapRule::to.
    std::vector<std::vector<Template>> templates;
  };
  std::vector<WeightMapRule> rule_list;
  std::vector<Rule> rules;  // rule_list's, compiled
};

namespace internal {

// How a map takes one source name: the first rule one of whose patterns matches it all,
// which of its patterns (the component, for a fuse), and the destination names its
// templates make from the captures (one; one per component for a split; for a pad
// without a template, the source name).
struct SourceMatch {
  int rule = 0;
  int component = 0;
  std::vector<std::string> destinations;
  // A template made a name longer than kMaxDestinationNameBytes (its expansion stopped
  // there): the caller refuses the rule.
  bool too_long = false;
  // A template made an empty name (of empty captures): the caller refuses the rule.
  bool empty_name = false;
};
inline constexpr size_t kMaxDestinationNameBytes = size_t{1} << 16;
std::optional<SourceMatch> MatchSource(const WeightMap::Compiled& map, absl::string_view name);

// Why fuse rule `rule` has no source for its component `k` among the source names `names`:
// ": 'N' matches it, but rule R takes it first (as its component C)" for the first name its
// pattern matches that an earlier rule takes, or "" when there is none.
std::string ComponentTakenNote(const WeightMap::Compiled& map, int rule, size_t k,
                               const std::vector<absl::string_view>& names);

// "rename", "fuse", "split", "pad".
const char* RuleKindName(WeightMapRule::Kind kind);
// How errors name rule `index` ("weight map rule 3 (fuse)"), and its application to a
// tensor ("weight map rule 3 (fuse) for 'x'").
std::string RuleName(size_t index, const WeightMapRule& rule);
std::string RuleWhere(size_t index, const WeightMapRule& rule, absl::string_view tensor);

// The map's compiled form, or that of a map of no rules (every source keeps its name).
const WeightMap::Compiled& CompiledOrEmpty(const WeightMap& map);

// "<n> rules, hash <xxh64 of Describe()>": what the agreements compare, so that ranks
// given different maps fail alike.
std::string WeightMapHash(const WeightMap& map);

}  // namespace internal

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_COMPILED_MAP_H_
