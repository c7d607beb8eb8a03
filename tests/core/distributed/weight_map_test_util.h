// Helpers of the single-process weight map tests (weight_map_rules_test.cc,
// weight_map_json_test.cc, weight_map_match_test.cc): rules built field by field, a map
// from rules or JSON that must be made (or the InvalidArgument message of one that must
// not), the match of one source name (internal::MatchSource) and the equality of two
// rules. Test code only.
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_TEST_UTIL_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_TEST_UTIL_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/weight_map.h"

namespace sdrt {
namespace testing_weight_map {

inline WeightMapRule Rule(WeightMapRule::Kind kind, std::vector<std::string> from,
                          std::vector<std::string> to) {
  WeightMapRule r;
  r.kind = kind;
  r.from = std::move(from);
  r.to = std::move(to);
  return r;
}

inline WeightMapRule Rename(std::string from, std::string to) {
  return Rule(WeightMapRule::Kind::kRename, {std::move(from)}, {std::move(to)});
}

// FromRules' error for `rules`, which must be InvalidArgument.
inline std::string Error(std::vector<WeightMapRule> rules) {
  absl::StatusOr<WeightMap> map = WeightMap::FromRules(std::move(rules));
  EXPECT_FALSE(map.ok());
  if (map.ok()) return "";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << map.status();
  return std::string(map.status().message());
}

// FromJson's error for `text`, which must be InvalidArgument.
inline std::string JsonError(const std::string& text) {
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(text);
  EXPECT_FALSE(map.ok()) << text;
  if (map.ok()) return "";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << map.status();
  return std::string(map.status().message());
}

// The map of `rules` / `text`, which must be made (an empty map, with the failure recorded,
// when refused).
inline WeightMap Map(std::vector<WeightMapRule> rules) {
  absl::StatusOr<WeightMap> map = WeightMap::FromRules(std::move(rules));
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? *std::move(map) : WeightMap();
}

inline WeightMap Json(const std::string& text) {
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(text);
  EXPECT_TRUE(map.ok()) << map.status() << "\n" << text;
  return map.ok() ? *std::move(map) : WeightMap();
}

// The match of `name` by `map` (none for a map without rules).
inline std::optional<internal::SourceMatch> Match(const WeightMap& map, const std::string& name) {
  if (map.compiled() == nullptr) return std::nullopt;
  return internal::MatchSource(*map.compiled(), name);
}

// The match of `name`, which must be by rule `rule` (component `component`) into `to`.
inline void ExpectMatch(const WeightMap& map, const std::string& name, int rule, int component,
                        const std::vector<std::string>& to) {
  const std::optional<internal::SourceMatch> m = Match(map, name);
  ASSERT_TRUE(m.has_value()) << name;
  EXPECT_EQ(m->rule, rule) << name;
  EXPECT_EQ(m->component, component) << name;
  EXPECT_EQ(m->destinations, to) << name;
}

// Every field of the two rules equal.
inline bool SameRule(const WeightMapRule& a, const WeightMapRule& b) {
  return a.kind == b.kind && a.from == b.from && a.to == b.to && a.dim == b.dim &&
         a.interleave == b.interleave && a.head_size == b.head_size && a.groups == b.groups &&
         a.multiple == b.multiple && a.source_interleave == b.source_interleave &&
         a.sizes == b.sizes;
}

}  // namespace testing_weight_map
}  // namespace sdrt

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_TEST_UTIL_H_
