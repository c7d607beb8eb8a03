// Single-process tests of weight maps (core/distributed/weight_map.h): FromRules' checks and
// their messages (each naming the rule's index and kind), the JSON form (FromJson), the
// canonical text Describe, the match of one source name (internal::MatchSource,
// internal/mapping/compiled_map.h) and the built-in maps. How a map moves bytes is in
// weight_map_mpi_test.cc.
#include "sdrt/core/distributed/weight_map.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

WeightMapRule Rule(Kind kind, std::vector<std::string> from, std::vector<std::string> to) {
  WeightMapRule r;
  r.kind = kind;
  r.from = std::move(from);
  r.to = std::move(to);
  return r;
}

WeightMapRule Rename(std::string from, std::string to) {
  return Rule(Kind::kRename, {std::move(from)}, {std::move(to)});
}

// FromRules' error for `rules`, which must be InvalidArgument.
std::string Error(std::vector<WeightMapRule> rules) {
  absl::StatusOr<WeightMap> map = WeightMap::FromRules(std::move(rules));
  EXPECT_FALSE(map.ok());
  if (map.ok()) return "";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << map.status();
  return std::string(map.status().message());
}

// FromJson's error for `text`, which must be InvalidArgument.
std::string JsonError(const std::string& text) {
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(text);
  EXPECT_FALSE(map.ok()) << text;
  if (map.ok()) return "";
  EXPECT_EQ(map.status().code(), absl::StatusCode::kInvalidArgument) << map.status();
  return std::string(map.status().message());
}

WeightMap Map(std::vector<WeightMapRule> rules) {
  absl::StatusOr<WeightMap> map = WeightMap::FromRules(std::move(rules));
  EXPECT_TRUE(map.ok()) << map.status();
  return map.ok() ? *std::move(map) : WeightMap();
}

WeightMap Json(const std::string& text) {
  absl::StatusOr<WeightMap> map = WeightMap::FromJson(text);
  EXPECT_TRUE(map.ok()) << map.status() << "\n" << text;
  return map.ok() ? *std::move(map) : WeightMap();
}

std::optional<internal::SourceMatch> Match(const WeightMap& map, const std::string& name) {
  if (map.compiled() == nullptr) return std::nullopt;
  return internal::MatchSource(*map.compiled(), name);
}

// The match of `name`, which must be by rule `rule` (component `component`) into `to`.
void ExpectMatch(const WeightMap& map, const std::string& name, int rule, int component,
                 const std::vector<std::string>& to) {
  const std::optional<internal::SourceMatch> m = Match(map, name);
  ASSERT_TRUE(m.has_value()) << name;
  EXPECT_EQ(m->rule, rule) << name;
  EXPECT_EQ(m->component, component) << name;
  EXPECT_EQ(m->destinations, to) << name;
}

bool SameRule(const WeightMapRule& a, const WeightMapRule& b) {
  return a.kind == b.kind && a.from == b.from && a.to == b.to && a.dim == b.dim &&
         a.interleave == b.interleave && a.head_size == b.head_size && a.groups == b.groups &&
         a.multiple == b.multiple;
}

// --- FromRules -----------------------------------------------------------------------------

TEST(WeightMapFromRules, AcceptsEachKindAndKeepsTheRules) {
  WeightMapRule fuse = Rule(Kind::kFuse, {R"(a(?P<i>\d+))", R"(b(?P<i>\d+))"}, {"ab{i}"});
  fuse.dim = 1;
  fuse.head_size = 64;
  WeightMapRule split = Rule(Kind::kSplit, {R"(c(\d+))"}, {"c{1}.x", "c{1}.y", "c{1}.z"});
  split.interleave = Interleave::kGroups;
  split.groups = 4;
  WeightMapRule pad = Rule(Kind::kPad, {"emb"}, {});
  pad.multiple = 64;
  const std::vector<WeightMapRule> rules = {Rename("x", "y"), fuse, split, pad};
  const WeightMap map = Map(rules);
  ASSERT_EQ(map.rules().size(), rules.size());
  for (size_t i = 0; i < rules.size(); ++i) EXPECT_TRUE(SameRule(map.rules()[i], rules[i])) << i;
  ASSERT_NE(map.compiled(), nullptr);
  EXPECT_EQ(map.compiled()->rules.size(), rules.size());
  EXPECT_EQ(map.compiled()->rules[1].patterns.size(), 2u);
  EXPECT_EQ(map.compiled()->rules[1].templates.size(), 2u);  // one parse per pattern
  EXPECT_EQ(map.compiled()->rules[2].templates[0].size(), 3u);

  const WeightMap none;
  EXPECT_TRUE(none.rules().empty());
  EXPECT_EQ(none.compiled(), nullptr);
  EXPECT_EQ(none.Describe(), "");
  const WeightMap empty = Map({});
  EXPECT_TRUE(empty.rules().empty());
  EXPECT_EQ(empty.Describe(), none.Describe());
  EXPECT_FALSE(Match(empty, "x").has_value());
}

TEST(WeightMapFromRules, RefusesTheWrongNumberOfPatterns) {
  EXPECT_THAT(Error({Rename("ok", "ok"), Rule(Kind::kRename, {}, {"x"})}),
              HasSubstr("weight map rule 1 (rename): 0 patterns; one"));
  EXPECT_THAT(Error({Rule(Kind::kRename, {"a", "b"}, {"x"})}),
              HasSubstr("weight map rule 0 (rename): 2 patterns; one"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, {"a"}, {"x"})}),
              HasSubstr("weight map rule 0 (fuse): 1 patterns; 2 to 16 (the components)"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, std::vector<std::string>(17, "a"), {"x"})}),
              HasSubstr("weight map rule 0 (fuse): 17 patterns; 2 to 16"));
  EXPECT_TRUE(WeightMap::FromRules({Rule(Kind::kFuse, std::vector<std::string>(16, "a"), {"x"})})
                  .ok());
  EXPECT_THAT(Error({Rule(Kind::kSplit, {"a", "b"}, {"x", "y"})}),
              HasSubstr("weight map rule 0 (split): 2 patterns; one"));
  EXPECT_THAT(Error({Rule(Kind::kPad, {}, {})}), HasSubstr("weight map rule 0 (pad): 0 patterns"));
}

TEST(WeightMapFromRules, RefusesTheWrongNumberOfTemplates) {
  EXPECT_THAT(Error({Rule(Kind::kRename, {"a"}, {})}),
              HasSubstr("weight map rule 0 (rename): 0 templates; one"));
  EXPECT_THAT(Error({Rule(Kind::kRename, {"a"}, {"x", "y"})}),
              HasSubstr("weight map rule 0 (rename): 2 templates; one"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, {"a", "b"}, {})}),
              HasSubstr("weight map rule 0 (fuse): 0 templates; one"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, {"a", "b"}, {"x", "y"})}),
              HasSubstr("weight map rule 0 (fuse): 2 templates; one"));
  EXPECT_THAT(Error({Rename("a", "b"), Rule(Kind::kSplit, {"a"}, {"x"})}),
              HasSubstr("weight map rule 1 (split): 1 templates; 2 to 16 (the components)"));
  EXPECT_THAT(Error({Rule(Kind::kSplit, {"a"}, std::vector<std::string>(17, "x"))}),
              HasSubstr("weight map rule 0 (split): 17 templates; 2 to 16"));
  EXPECT_TRUE(
      WeightMap::FromRules({Rule(Kind::kSplit, {"a"}, std::vector<std::string>(16, "x"))}).ok());
  EXPECT_THAT(Error({Rule(Kind::kPad, {"a"}, {"x", "y"})}),
              HasSubstr("weight map rule 0 (pad): 2 templates"));
  // A pad may leave its template out, or have one.
  EXPECT_TRUE(WeightMap::FromRules({Rule(Kind::kPad, {"a"}, {})}).ok());
  EXPECT_TRUE(WeightMap::FromRules({Rule(Kind::kPad, {"a"}, {"b"})}).ok());
}

TEST(WeightMapFromRules, RefusesAPatternRe2Refuses) {
  const std::string e = Error({Rename("a", "b"), Rename("c", "d"), Rename("x(", "y")});
  EXPECT_THAT(e, HasSubstr("weight map rule 2 (rename): pattern 'x(': "));
  EXPECT_THAT(e, HasSubstr("missing )"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, {"a", "[b"}, {"x"})}),
              HasSubstr("weight map rule 0 (fuse): pattern '[b': "));
  // RE2 has no backreferences or lookaheads.
  EXPECT_THAT(Error({Rule(Kind::kSplit, {R"((a)\1)"}, {"x", "y"})}),
              HasSubstr("weight map rule 0 (split): pattern "));
  EXPECT_THAT(Error({Rule(Kind::kPad, {"(?=a)"}, {})}),
              HasSubstr("weight map rule 0 (pad): pattern '(?=a)'"));
}

TEST(WeightMapFromRules, RefusesATemplateNamingAGroupThePatternLacks) {
  EXPECT_THAT(Error({Rename(R"(a(?P<i>\d+))", "b{j}")}),
              HasSubstr("weight map rule 0 (rename): template 'b{j}' names {j}, which its "
                        "pattern 'a(?P<i>\\d+)' does not capture"));
  EXPECT_THAT(Error({Rename(R"(a(\d+))", "b{2}")}),
              HasSubstr("weight map rule 0 (rename): template 'b{2}' names {2}"));
  // Group 0 (the whole match) is not offered; nor is an empty or malformed name.
  EXPECT_THAT(Error({Rename(R"(a(\d+))", "b{0}")}), HasSubstr("names {0}"));
  EXPECT_THAT(Error({Rename(R"(a(\d+))", "b{}")}), HasSubstr("names {}"));
  EXPECT_THAT(Error({Rename(R"(a(\d+))", "b{1x}")}), HasSubstr("names {1x}"));
  EXPECT_THAT(Error({Rename("a", "b{99999999999999999999}")}),
              HasSubstr("names {99999999999999999999}"));
  // A fuse parses its template against each component's pattern: all must capture it.
  EXPECT_THAT(Error({Rename("ok", "ok"),
                     Rule(Kind::kFuse, {R"(q(?P<i>\d+))", R"(k(\d+))"}, {"qk{i}"})}),
              HasSubstr("weight map rule 1 (fuse): template 'qk{i}' names {i}, which its "
                        "pattern 'k(\\d+)' does not capture"));
  EXPECT_THAT(Error({Rule(Kind::kSplit, {R"(s(?P<i>\d+))"}, {"a{i}", "b{n}"})}),
              HasSubstr("weight map rule 0 (split): template 'b{n}' names {n}"));
  EXPECT_THAT(Error({Rule(Kind::kPad, {"e"}, {"{i}"})}),
              HasSubstr("weight map rule 0 (pad): template '{i}' names {i}"));
  // A named group is also a numbered one.
  EXPECT_TRUE(WeightMap::FromRules({Rename(R"(a(?P<i>\d+))", "b{1}.{i}")}).ok());
}

TEST(WeightMapFromRules, RefusesUnbalancedBraces) {
  EXPECT_THAT(Error({Rename("a", "b{")}),
              HasSubstr("weight map rule 0 (rename): template 'b{' has a '{' without its '}'"));
  EXPECT_THAT(Error({Rename(R"(a(\d))", "b{1")}), HasSubstr("has a '{' without its '}'"));
  EXPECT_THAT(Error({Rename("x", "y"), Rename("a", "b}c")}),
              HasSubstr("weight map rule 1 (rename): template 'b}c' has a '}' without its '{' "
                        "(write '}}')"));
  EXPECT_THAT(Error({Rename(R"(a(\d))", "{1}}")}), HasSubstr("has a '}' without its '{'"));
  EXPECT_THAT(Error({Rename("a", "{{}")}), HasSubstr("has a '}' without its '{'"));
  EXPECT_THAT(Error({Rule(Kind::kSplit, {"a"}, {"x", "}"})}),
              HasSubstr("weight map rule 0 (split): template '}' has a '}' without"));
}

TEST(WeightMapFromRules, DoubledBracesAreLiteralBraces) {
  const WeightMap map = Map({Rename(R"(a(?P<i>\d+))", "{{{i}}}.{{i}}.}}{{"),
                             Rename("plain", "{{}}")});
  ExpectMatch(map, "a12", 0, 0, {"{12}.{i}.}{"});
  ExpectMatch(map, "plain", 1, 0, {"{}"});
  ASSERT_NE(map.compiled(), nullptr);
  // Literal text and groups in turn: "{", group 1, "}.{i}.}{".
  const WeightMap::Compiled::Template& t = map.compiled()->rules[0].templates[0][0];
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].literal, "{");
  EXPECT_EQ(t[0].group, -1);
  EXPECT_EQ(t[1].group, 1);
  EXPECT_EQ(t[2].literal, "}.{i}.}{");
  EXPECT_EQ(t[2].group, -1);
}

TEST(WeightMapFromRules, RefusesADimOutOfRange) {
  WeightMapRule fuse = Rule(Kind::kFuse, {"a", "b"}, {"ab"});
  fuse.dim = 12;
  EXPECT_THAT(Error({fuse}), HasSubstr("weight map rule 0 (fuse): dim 12 not in [0, 12)"));
  fuse.dim = -1;
  EXPECT_THAT(Error({Rename("x", "y"), fuse}),
              HasSubstr("weight map rule 1 (fuse): dim -1 not in [0, 12)"));
  WeightMapRule pad = Rule(Kind::kPad, {"a"}, {});
  pad.dim = 100;
  EXPECT_THAT(Error({pad}), HasSubstr("weight map rule 0 (pad): dim 100 not in [0, 12)"));
  WeightMapRule split = Rule(Kind::kSplit, {"a"}, {"x", "y"});
  split.dim = 11;
  EXPECT_TRUE(WeightMap::FromRules({split}).ok());
  split.dim = -5;
  EXPECT_THAT(Error({split}), HasSubstr("weight map rule 0 (split): dim -5 not in [0, 12)"));
}

TEST(WeightMapFromRules, RefusesCountsOutOfRange) {
  constexpr int64_t kMax = int64_t{1} << 40;
  WeightMapRule fuse = Rule(Kind::kFuse, {"a", "b"}, {"ab"});
  fuse.head_size = -1;
  EXPECT_THAT(Error({fuse}),
              HasSubstr("weight map rule 0 (fuse): head_size -1, groups 0 and multiple 1 must lie "
                        "in [0, 2^40] ([1, 2^40])"));
  fuse.head_size = kMax + 1;
  EXPECT_THAT(Error({fuse}), HasSubstr("weight map rule 0 (fuse): head_size 1099511627777"));
  fuse.head_size = kMax;
  EXPECT_TRUE(WeightMap::FromRules({fuse}).ok());

  WeightMapRule split = Rule(Kind::kSplit, {"a"}, {"x", "y"});
  split.head_size = -128;
  EXPECT_THAT(Error({Rename("x", "y"), split}),
              HasSubstr("weight map rule 1 (split): head_size -128"));
  split.head_size = 0;
  split.groups = -2;
  EXPECT_THAT(Error({split}), HasSubstr("weight map rule 0 (split): head_size 0, groups -2"));

  WeightMapRule pad = Rule(Kind::kPad, {"a"}, {});
  pad.multiple = 0;
  EXPECT_THAT(Error({pad}),
              HasSubstr("weight map rule 0 (pad): head_size 0, groups 0 and multiple 0"));
  pad.multiple = -64;
  EXPECT_THAT(Error({pad}), HasSubstr("weight map rule 0 (pad): head_size 0, groups 0 and "
                                      "multiple -64"));
  pad.multiple = kMax + 1;
  EXPECT_THAT(Error({pad}), HasSubstr("multiple 1099511627777"));
  pad.multiple = 1;
  EXPECT_TRUE(WeightMap::FromRules({pad}).ok());
}

TEST(WeightMapFromRules, RefusesOverLongTextAndTooManyRules) {
  const std::string longest(4096, 'a');
  EXPECT_TRUE(WeightMap::FromRules({Rename(longest, longest)}).ok());
  EXPECT_THAT(Error({Rename("x", "y"), Rename(longest + "a", "b")}),
              HasSubstr("weight map rule 1 (rename): a pattern of 4097 bytes; at most 4096"));
  EXPECT_THAT(Error({Rule(Kind::kFuse, {"a", longest + "b"}, {"x"})}),
              HasSubstr("weight map rule 0 (fuse): a pattern of 4097 bytes"));
  EXPECT_THAT(Error({Rule(Kind::kSplit, {"a"}, {"x", longest + "y"})}),
              HasSubstr("weight map rule 0 (split): a template of 4097 bytes; at most 4096"));

  std::vector<WeightMapRule> many(10000, Rename("a", "b"));
  EXPECT_TRUE(WeightMap::FromRules(many).ok());
  many.push_back(Rename("a", "b"));
  EXPECT_THAT(Error(many), HasSubstr("weight map: 10001 rules; at most 10000"));
}

// --- FromJson ------------------------------------------------------------------------------

TEST(WeightMapFromJson, EachKindIntoItsRule) {
  const WeightMap map = Json(R"json({"rules": [
    {"rename": "model\\.layers\\.(?P<i>\\d+)\\.self_attn\\.o_proj\\.weight",
     "to": "layers.{i}.attn.out.weight"},
    {"fuse": ["q(?P<i>\\d+)", "k(?P<i>\\d+)", "v(?P<i>\\d+)"], "to": "qkv{i}",
     "dim": 1, "interleave": "shards", "head_size": 128},
    {"split": "fc1\\.(\\d+)", "to": ["gate.{1}", "up.{1}"], "interleave": "groups",
     "groups": 1, "dim": 0},
    {"split": "qkv", "to": ["q", "k", "v"], "interleave": "groups", "head_size": 64},
    {"pad": "embed", "multiple": 64},
    {"pad": "head", "to": "head.padded", "dim": 1, "multiple": 8}
  ]})json");
  ASSERT_EQ(map.rules().size(), 6u);
  const std::vector<WeightMapRule>& r = map.rules();

  WeightMapRule rename = Rename(R"(model\.layers\.(?P<i>\d+)\.self_attn\.o_proj\.weight)",
                                "layers.{i}.attn.out.weight");
  EXPECT_TRUE(SameRule(r[0], rename));

  WeightMapRule fuse = Rule(Kind::kFuse, {R"(q(?P<i>\d+))", R"(k(?P<i>\d+))", R"(v(?P<i>\d+))"},
                            {"qkv{i}"});
  fuse.dim = 1;
  fuse.head_size = 128;
  EXPECT_TRUE(SameRule(r[1], fuse));

  WeightMapRule split = Rule(Kind::kSplit, {R"(fc1\.(\d+))"}, {"gate.{1}", "up.{1}"});
  split.interleave = Interleave::kGroups;
  split.groups = 1;
  EXPECT_TRUE(SameRule(r[2], split));

  WeightMapRule qkv = Rule(Kind::kSplit, {"qkv"}, {"q", "k", "v"});
  qkv.interleave = Interleave::kGroups;
  qkv.head_size = 64;
  EXPECT_TRUE(SameRule(r[3], qkv));

  WeightMapRule pad = Rule(Kind::kPad, {"embed"}, {});
  pad.multiple = 64;
  EXPECT_TRUE(SameRule(r[4], pad));

  WeightMapRule padded = Rule(Kind::kPad, {"head"}, {"head.padded"});
  padded.dim = 1;
  padded.multiple = 8;
  EXPECT_TRUE(SameRule(r[5], padded));

  // The same rules through FromRules make the same map.
  EXPECT_EQ(map.Describe(), Map({rename, fuse, split, qkv, pad, padded}).Describe());

  ExpectMatch(map, "model.layers.3.self_attn.o_proj.weight", 0, 0,
              {"layers.3.attn.out.weight"});
  ExpectMatch(map, "k7", 1, 1, {"qkv7"});
  ExpectMatch(map, "fc1.2", 2, 0, {"gate.2", "up.2"});
  ExpectMatch(map, "embed", 4, 0, {"embed"});
  ExpectMatch(map, "head", 5, 0, {"head.padded"});
}

TEST(WeightMapFromJson, EmptyRulesAndKeyOrder) {
  const WeightMap empty = Json(R"({"rules": []})");
  EXPECT_TRUE(empty.rules().empty());
  // Keys in any order; "to" before the kind.
  const WeightMap a = Json(R"({"rules": [{"to": "y", "rename": "x"}]})");
  const WeightMap b = Json(R"({"rules": [{"rename": "x", "to": "y"}]})");
  EXPECT_EQ(a.Describe(), b.Describe());
  ASSERT_EQ(a.rules().size(), 1u);
  EXPECT_TRUE(SameRule(a.rules()[0], Rename("x", "y")));
}

TEST(WeightMapFromJson, RefusesMalformedJson) {
  EXPECT_THAT(JsonError(""), HasSubstr("weight map: not valid JSON"));
  EXPECT_THAT(JsonError(R"({"rules": [)"), HasSubstr("weight map: not valid JSON"));
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "to": "b",}]})"),
              HasSubstr("weight map: not valid JSON"));
  EXPECT_THAT(JsonError(R"({"rules": []} trailing)"), HasSubstr("weight map: not valid JSON"));
  EXPECT_THAT(JsonError(std::string(100, '[') + std::string(100, ']')),
              HasSubstr("nested deeper than 64 levels"));
}

TEST(WeightMapFromJson, RefusesADuplicateKey) {
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "to": "b", "to": "c"}]})"),
              HasSubstr("weight map: duplicate key \"to\" in one object"));
  EXPECT_THAT(JsonError(R"({"rules": [], "rules": []})"), HasSubstr("duplicate key \"rules\""));
}

TEST(WeightMapFromJson, RefusesUnknownKeys) {
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "to": "b"},
                                      {"rename": "a", "to": "b", "from": "c"}]})"),
              HasSubstr("weight map rule 1: unknown key \"from\""));
  EXPECT_THAT(JsonError(R"({"rules": [{"pad": "a", "Multiple": 8}]})"),
              HasSubstr("weight map rule 0: unknown key \"Multiple\""));
}

TEST(WeightMapFromJson, RefusesFieldsOfTheWrongType) {
  const auto rule = [](const std::string& body) {
    return JsonError(absl::StrCat(R"({"rules": [)", body, "]}"));
  };
  EXPECT_THAT(rule(R"({"fuse": ["a", "b"], "to": "x", "dim": "0"})"),
              HasSubstr("weight map rule 0: \"dim\" must be an integer"));
  EXPECT_THAT(rule(R"({"fuse": ["a", "b"], "to": "x", "dim": 0.5})"),
              HasSubstr("\"dim\" must be an integer"));
  EXPECT_THAT(rule(R"({"fuse": ["a", "b"], "to": "x", "dim": 1.0})"),
              HasSubstr("\"dim\" must be an integer"));
  EXPECT_THAT(rule(R"({"fuse": "x", "to": "y"})"),
              HasSubstr("weight map rule 0: \"fuse\" must be an array of strings"));
  EXPECT_THAT(rule(R"({"fuse": ["a", 1], "to": "y"})"),
              HasSubstr("\"fuse\" must be an array of strings"));
  EXPECT_THAT(rule(R"({"rename": ["a"], "to": "y"})"),
              HasSubstr("weight map rule 0: \"rename\" must be a string"));
  EXPECT_THAT(rule(R"({"split": 3, "to": ["x", "y"]})"), HasSubstr("\"split\" must be a string"));
  EXPECT_THAT(rule(R"({"pad": null})"), HasSubstr("\"pad\" must be a string"));
  EXPECT_THAT(rule(R"({"rename": "a", "to": 1})"), HasSubstr("\"to\" must be a string"));
  EXPECT_THAT(rule(R"({"split": "a", "to": ["x", null]})"),
              HasSubstr("\"to\" must be an array of strings"));
  EXPECT_THAT(rule(R"({"split": "a", "to": ["x", "y"], "interleave": "rows"})"),
              HasSubstr("weight map rule 0: \"interleave\" must be \"shards\" or \"groups\""));
  EXPECT_THAT(rule(R"({"split": "a", "to": ["x", "y"], "interleave": 1})"),
              HasSubstr("\"interleave\" must be"));
  EXPECT_THAT(rule(R"({"split": "a", "to": ["x", "y"], "head_size": "64"})"),
              HasSubstr("\"head_size\" must be an integer"));
  EXPECT_THAT(rule(R"({"split": "a", "to": ["x", "y"], "groups": true})"),
              HasSubstr("\"groups\" must be an integer"));
  EXPECT_THAT(rule(R"({"pad": "a", "multiple": [64]})"),
              HasSubstr("\"multiple\" must be an integer"));
  EXPECT_THAT(rule(R"({"pad": "a", "multiple": 18446744073709551615})"),
              HasSubstr("\"multiple\" is out of range"));
  EXPECT_THAT(rule(R"({"rename": "a", "to": "b"}, "not a rule")"),
              HasSubstr("weight map rule 1: not an object"));
}

TEST(WeightMapFromJson, ValuesAreCheckedByFromRules) {
  // The fields' values are FromRules' to check, and the messages name the rule and kind.
  EXPECT_THAT(JsonError(R"({"rules": [{"fuse": ["a", "b"], "to": "x", "dim": 12}]})"),
              HasSubstr("weight map rule 0 (fuse): dim 12 not in [0, 12)"));
  EXPECT_THAT(JsonError(R"({"rules": [{"fuse": ["a", "b"], "to": "x", "dim": 65}]})"),
              HasSubstr("weight map rule 0 (fuse): dim 65 not in [0, 12)"));
  EXPECT_THAT(JsonError(R"({"rules": [{"fuse": ["a", "b"], "to": "x", "dim": -7}]})"),
              HasSubstr("weight map rule 0 (fuse): dim -7 not in [0, 12)"));
  EXPECT_THAT(JsonError(R"({"rules": [{"pad": "a", "dim": 9999999999}]})"),
              HasSubstr("weight map rule 0: \"dim\" 9999999999 not in [0, 12)"));
  EXPECT_THAT(JsonError(R"({"rules": [{"split": "a", "to": ["x", "y"], "head_size": -1}]})"),
              HasSubstr("weight map rule 0 (split): head_size -1"));
  EXPECT_THAT(JsonError(R"({"rules": [{"pad": "a", "multiple": 0}]})"),
              HasSubstr("weight map rule 0 (pad): head_size 0, groups 0 and multiple 0"));
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a("}]})"),
              HasSubstr("weight map rule 0 (rename): 0 templates; one"));
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a(", "to": "b"}]})"),
              HasSubstr("weight map rule 0 (rename): pattern 'a('"));
  EXPECT_THAT(JsonError(R"({"rules": [{"split": "a", "to": "b"}]})"),
              HasSubstr("weight map rule 0 (split): 1 templates"));
  EXPECT_THAT(JsonError(R"({"rules": [{"fuse": ["a"], "to": "b"}]})"),
              HasSubstr("weight map rule 0 (fuse): 1 patterns"));
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "to": "{x"}]})"),
              HasSubstr("weight map rule 0 (rename): template '{x' has a '{' without its '}'"));
}

TEST(WeightMapFromJson, RefusesARuleOfTwoKindsOrNone) {
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "pad": "b", "to": "c"}]})"),
              HasSubstr("weight map rule 0: needs exactly one of \"rename\", \"fuse\", "
                        "\"split\", \"pad\""));
  EXPECT_THAT(JsonError(R"({"rules": [{"rename": "a", "to": "b"},
                                      {"fuse": ["a", "b"], "split": "c", "to": "x"}]})"),
              HasSubstr("weight map rule 1: needs exactly one of"));
  EXPECT_THAT(JsonError(R"({"rules": [{"to": "c"}]})"),
              HasSubstr("weight map rule 0: needs exactly one of"));
  EXPECT_THAT(JsonError(R"({"rules": [{}]})"), HasSubstr("weight map rule 0: needs exactly one"));
}

TEST(WeightMapFromJson, RefusesADocumentThatIsNotRules) {
  for (const char* text : {R"([])", R"([{"rename": "a", "to": "b"}])", R"({})", R"("rules")",
                           R"(null)", R"(3)", R"({"rules": {}})", R"({"rules": "a"})",
                           R"({"rules": null})", R"({"Rules": []})",
                           R"({"rules": [], "version": 1})"}) {
    EXPECT_THAT(JsonError(text),
                HasSubstr("weight map: the document must be {\"rules\": [...]} and nothing else"))
        << text;
  }
}

TEST(WeightMapFromJson, RefusesMoreThanOneMiB) {
  // A valid document of exactly 1 MiB (padded with spaces) is read; one byte more is not.
  const std::string head = R"({"rules": [{"rename": "a", "to": "b"}]})";
  std::string text = head + std::string((size_t{1} << 20) - head.size(), ' ');
  ASSERT_EQ(text.size(), size_t{1} << 20);
  EXPECT_EQ(Json(text).rules().size(), 1u);
  text += ' ';
  EXPECT_THAT(JsonError(text), HasSubstr("weight map: 1048577 bytes of JSON; at most 1 MiB"));
}

// --- Describe ------------------------------------------------------------------------------

TEST(WeightMapDescribe, EqualForEqualMapsDifferentForAnyField) {
  WeightMapRule base = Rule(Kind::kFuse, {R"(a(?P<i>\d+))", R"(b(?P<i>\d+))"}, {"ab{i}"});
  base.dim = 1;
  base.head_size = 64;
  base.groups = 2;
  base.multiple = 3;
  const std::vector<WeightMapRule> rules = {Rename("x", "y"), base};
  const std::string text = Map(rules).Describe();
  EXPECT_EQ(Map(rules).Describe(), text);
  EXPECT_FALSE(text.empty());

  std::vector<std::vector<WeightMapRule>> others;
  const auto with = [&](auto change) {
    std::vector<WeightMapRule> r = rules;
    change(r[1]);
    others.push_back(std::move(r));
  };
  with([](WeightMapRule& r) {
    r.kind = Kind::kSplit;
    r.from = {r.from[0]};
    r.to = {"a", "b"};
  });
  with([](WeightMapRule& r) { r.from[1] = R"(c(?P<i>\d+))"; });
  with([](WeightMapRule& r) { r.from.push_back(R"(c(?P<i>\d+))"); });
  with([](WeightMapRule& r) { std::swap(r.from[0], r.from[1]); });
  with([](WeightMapRule& r) { r.to[0] = "ba{i}"; });
  with([](WeightMapRule& r) { r.dim = 0; });
  with([](WeightMapRule& r) { r.interleave = Interleave::kGroups; });
  with([](WeightMapRule& r) { r.head_size = 128; });
  with([](WeightMapRule& r) { r.groups = 0; });
  with([](WeightMapRule& r) { r.multiple = 1; });
  others.push_back({rules[1], rules[0]});  // the order of the rules
  others.push_back({rules[0]});
  others.push_back({rules[0], rules[1], rules[1]});
  std::vector<std::string> seen = {text};
  for (size_t k = 0; k < others.size(); ++k) {
    const std::string other = Map(others[k]).Describe();
    for (const std::string& s : seen) EXPECT_NE(other, s) << "change " << k;
    seen.push_back(other);
  }
}

TEST(WeightMapDescribe, PatternsAndTemplatesCannotRunTogether) {
  // Patterns and templates may hold any byte, the separators included: '|' is RE2's
  // alternation. These pairs of maps are different and must describe differently.
  const std::vector<std::pair<std::vector<WeightMapRule>, std::vector<WeightMapRule>>> pairs = {
      {{Rename("a|b", "c")}, {Rename("a", "b|c")}},
      {{Rule(Kind::kFuse, {"a\x1f" "b", "c"}, {"x"})},
       {Rule(Kind::kFuse, {"a", "b\x1f" "c"}, {"x"})}},
      {{Rule(Kind::kSplit, {"a"}, {"x\x1f" "y", "z"})},
       {Rule(Kind::kSplit, {"a"}, {"x", "y\x1f" "z"})}},
      {{Rename("a", "b|0|shards|0|0|1\n" "rename|c|d")}, {Rename("a", "b"), Rename("c", "d")}},
      {{Rule(Kind::kPad, {"a"}, {})}, {Rule(Kind::kPad, {"a"}, {""})}},
  };
  for (size_t k = 0; k < pairs.size(); ++k) {
    const WeightMap a = Map(pairs[k].first);
    const WeightMap b = Map(pairs[k].second);
    EXPECT_NE(a.Describe(), b.Describe()) << "pair " << k;
  }
}

TEST(WeightMapDescribe, JsonAndBuiltinAreStable) {
  EXPECT_EQ(WeightMap::Builtin("vllm-llama", 128)->Describe(),
            WeightMap::Builtin("vllm-llama", 128)->Describe());
  EXPECT_NE(WeightMap::Builtin("vllm-llama", 128)->Describe(),
            WeightMap::Builtin("vllm-llama", 64)->Describe());
  EXPECT_NE(WeightMap::Builtin("vllm-llama", 128)->Describe(),
            WeightMap::Builtin("megatron-llama", 128)->Describe());
  // A copy shares the compiled rules and describes the same.
  const WeightMap map = *WeightMap::Builtin("megatron-llama", 128);
  const WeightMap copy = map;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.compiled(), map.compiled());
  EXPECT_EQ(copy.Describe(), map.Describe());
}

// --- MatchSource ---------------------------------------------------------------------------

TEST(WeightMapMatch, FirstMatchingRuleWins) {
  const WeightMap map = Map({Rename("a\\.special", "first"), Rename(R"(a\.\w+)", "second"),
                             Rename(R"(a\.special)", "never")});
  ExpectMatch(map, "a.special", 0, 0, {"first"});
  ExpectMatch(map, "a.other", 1, 0, {"second"});
}

TEST(WeightMapMatch, MatchesTheWholeName) {
  const WeightMap map = Map({Rename(R"(layers\.(\d+)\.w)", "l{1}"), Rename("b|c", "bc")});
  ExpectMatch(map, "layers.3.w", 0, 0, {"l3"});
  EXPECT_FALSE(Match(map, "model.layers.3.w").has_value());
  EXPECT_FALSE(Match(map, "layers.3.weight").has_value());
  EXPECT_FALSE(Match(map, "layers.3.w.x").has_value());
  EXPECT_FALSE(Match(map, "").has_value());
  // An alternation is anchored as a whole.
  ExpectMatch(map, "b", 1, 0, {"bc"});
  ExpectMatch(map, "c", 1, 0, {"bc"});
  EXPECT_FALSE(Match(map, "bx").has_value());
  EXPECT_FALSE(Match(map, "xc").has_value());
}

TEST(WeightMapMatch, NamedAndNumberedCaptures) {
  const WeightMap map =
      Map({Rename(R"(m\.(?P<layer>\d+)\.(?P<part>[a-z]+)\.(\w+))", "{part}/{layer}/{3}/{1}{2}"),
           Rename(R"((a)(b)?(c))", "[{1}|{2}|{3}]")});
  ExpectMatch(map, "m.12.attn.weight", 0, 0, {"attn/12/weight/12attn"});
  // A group that takes no part in the match gives the empty string.
  ExpectMatch(map, "ac", 1, 0, {"[a||c]"});
  ExpectMatch(map, "abc", 1, 0, {"[a|b|c]"});
}

TEST(WeightMapMatch, FuseComponentIndex) {
  const WeightMap map = Map(
      {Rename("other", "o"),
       Rule(Kind::kFuse, {R"(l(?P<i>\d+)\.q)", R"(l(?P<i>\d+)\.k)", R"(l(\d+)\.v)"},
            {"l{1}.qkv"})});
  ExpectMatch(map, "l0.q", 1, 0, {"l0.qkv"});
  ExpectMatch(map, "l5.k", 1, 1, {"l5.qkv"});
  ExpectMatch(map, "l9.v", 1, 2, {"l9.qkv"});
  EXPECT_FALSE(Match(map, "l9.o").has_value());
}

TEST(WeightMapMatch, SplitDestinations) {
  const WeightMap map =
      Map({Rule(Kind::kSplit, {R"(d\.(?P<i>\d+)\.qkv)"}, {"h.{i}.q", "h.{i}.k", "h.{i}.v"})});
  ExpectMatch(map, "d.4.qkv", 0, 0, {"h.4.q", "h.4.k", "h.4.v"});
}

TEST(WeightMapMatch, PadKeepsTheNameWithoutATemplate) {
  const WeightMap map = Map({Rule(Kind::kPad, {R"(emb\.\w+)"}, {}),
                             Rule(Kind::kPad, {R"(head\.(\w+))"}, {"head.{1}.padded"})});
  ExpectMatch(map, "emb.weight", 0, 0, {"emb.weight"});
  ExpectMatch(map, "head.weight", 1, 0, {"head.weight.padded"});
}

TEST(WeightMapMatch, NoRuleMatches) {
  const WeightMap map = Map({Rename("a", "b"), Rule(Kind::kPad, {"c"}, {})});
  EXPECT_FALSE(Match(map, "x").has_value());
  EXPECT_FALSE(Match(map, "b").has_value());  // a destination is not a source
  EXPECT_FALSE(Match(map, std::string("a\0", 2)).has_value());
}

// --- Builtin -------------------------------------------------------------------------------

TEST(WeightMapBuiltin, NamesAndHeadSizes) {
  for (const char* name : {"vllm-llama", "megatron-llama"}) {
    absl::StatusOr<WeightMap> map = WeightMap::Builtin(name, 128);
    ASSERT_TRUE(map.ok()) << name << ": " << map.status();
    EXPECT_FALSE(map->rules().empty());
    for (int64_t bad : {int64_t{0}, int64_t{-1}, int64_t{-128}, (int64_t{1} << 40) + 1}) {
      absl::StatusOr<WeightMap> refused = WeightMap::Builtin(name, bad);
      ASSERT_FALSE(refused.ok()) << name << " " << bad;
      EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(refused.status().message()),
                  HasSubstr(absl::StrCat("weight map '", name, "': head size ", bad,
                                         " must be in [1, 2^40]")));
    }
  }
  for (const char* name : {"", "vllm", "Megatron-llama", "vllm-llama "}) {
    absl::StatusOr<WeightMap> refused = WeightMap::Builtin(name, 128);
    ASSERT_FALSE(refused.ok()) << name;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr(absl::StrCat("no built-in weight map '", name,
                                       "' (there are vllm-llama and megatron-llama)")));
  }
}

TEST(WeightMapBuiltin, VllmLlama) {
  const WeightMap map = *WeightMap::Builtin("vllm-llama", 128);
  const std::vector<WeightMapRule>& rules = map.rules();

  std::optional<internal::SourceMatch> m =
      Match(map, "model.layers.7.self_attn.k_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->component, 1);
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.7.self_attn.qkv_proj.weight"));
  EXPECT_EQ(rules[m->rule].kind, Kind::kFuse);
  EXPECT_EQ(rules[m->rule].interleave, Interleave::kShards);
  EXPECT_EQ(rules[m->rule].head_size, 128);
  EXPECT_EQ(rules[m->rule].dim, 0);
  const int qkv_rule = m->rule;

  m = Match(map, "model.layers.7.self_attn.q_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rule, qkv_rule);
  EXPECT_EQ(m->component, 0);
  m = Match(map, "model.layers.7.self_attn.v_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->rule, qkv_rule);
  EXPECT_EQ(m->component, 2);
  m = Match(map, "model.layers.0.self_attn.v_proj.bias");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->component, 2);
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.0.self_attn.qkv_proj.bias"));

  m = Match(map, "model.layers.3.mlp.up_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->component, 1);
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.3.mlp.gate_up_proj.weight"));
  EXPECT_EQ(rules[m->rule].kind, Kind::kFuse);
  EXPECT_EQ(rules[m->rule].interleave, Interleave::kShards);
  EXPECT_EQ(rules[m->rule].head_size, 0);
  m = Match(map, "model.layers.3.mlp.gate_proj.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->component, 0);

  for (const char* padded : {"model.embed_tokens.weight", "lm_head.weight"}) {
    m = Match(map, padded);
    ASSERT_TRUE(m.has_value()) << padded;
    EXPECT_EQ(m->component, 0);
    EXPECT_THAT(m->destinations, ElementsAre(padded));
    EXPECT_EQ(rules[m->rule].kind, Kind::kPad);
    EXPECT_EQ(rules[m->rule].multiple, 64);
    EXPECT_EQ(rules[m->rule].dim, 0);
  }

  for (const char* kept :
       {"model.norm.weight", "model.layers.3.mlp.down_proj.weight",
        "model.layers.7.self_attn.o_proj.weight", "model.layers.7.input_layernorm.weight",
        "model.layers.x.self_attn.k_proj.weight", "model.layers.7.self_attn.k_proj.weight.x",
        "layers.7.self_attn.k_proj.weight", "model.layers.3.mlp.up_proj.bias"}) {
    EXPECT_FALSE(Match(map, kept).has_value()) << kept;
  }
}

TEST(WeightMapBuiltin, MegatronLlama) {
  const WeightMap map = *WeightMap::Builtin("megatron-llama", 96);
  const std::vector<WeightMapRule>& rules = map.rules();

  std::optional<internal::SourceMatch> m =
      Match(map, "decoder.layers.2.self_attention.linear_qkv.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->component, 0);
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.2.self_attn.q_proj.weight",
                                           "model.layers.2.self_attn.k_proj.weight",
                                           "model.layers.2.self_attn.v_proj.weight"));
  EXPECT_EQ(rules[m->rule].kind, Kind::kSplit);
  EXPECT_EQ(rules[m->rule].interleave, Interleave::kGroups);
  EXPECT_EQ(rules[m->rule].head_size, 96);
  EXPECT_EQ(rules[m->rule].groups, 0);

  m = Match(map, "decoder.layers.2.self_attention.linear_qkv.bias");
  ASSERT_TRUE(m.has_value());
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.2.self_attn.q_proj.bias",
                                           "model.layers.2.self_attn.k_proj.bias",
                                           "model.layers.2.self_attn.v_proj.bias"));

  m = Match(map, "decoder.layers.11.mlp.linear_fc1.weight");
  ASSERT_TRUE(m.has_value());
  EXPECT_THAT(m->destinations, ElementsAre("model.layers.11.mlp.gate_proj.weight",
                                           "model.layers.11.mlp.up_proj.weight"));
  EXPECT_EQ(rules[m->rule].kind, Kind::kSplit);
  EXPECT_EQ(rules[m->rule].interleave, Interleave::kGroups);
  EXPECT_EQ(rules[m->rule].groups, 1);

  const std::pair<const char*, const char*> renames[] = {
      {"decoder.layers.2.mlp.linear_fc2.weight", "model.layers.2.mlp.down_proj.weight"},
      {"decoder.layers.2.self_attention.linear_proj.weight",
       "model.layers.2.self_attn.o_proj.weight"},
      {"decoder.layers.2.self_attention.linear_qkv.layer_norm_weight",
       "model.layers.2.input_layernorm.weight"},
      {"decoder.layers.2.mlp.linear_fc1.layer_norm_weight",
       "model.layers.2.post_attention_layernorm.weight"},
      {"embedding.word_embeddings.weight", "model.embed_tokens.weight"},
      {"decoder.final_layernorm.weight", "model.norm.weight"},
      {"output_layer.weight", "lm_head.weight"},
  };
  for (const auto& [from, to] : renames) {
    m = Match(map, from);
    ASSERT_TRUE(m.has_value()) << from;
    EXPECT_EQ(rules[m->rule].kind, Kind::kRename) << from;
    EXPECT_EQ(m->component, 0);
    EXPECT_THAT(m->destinations, ElementsAre(to)) << from;
  }
  for (const char* kept : {"model.layers.2.mlp.down_proj.weight", "decoder.layers.2.mlp.x",
                           "decoder.layers.2.mlp.linear_fc2.weightx", "output_layer.bias"}) {
    EXPECT_FALSE(Match(map, kept).has_value()) << kept;
  }
}

TEST(WeightMapBuiltin, RoundTripsThroughJson) {
  // Each built-in map written as JSON reads back into the same rules.
  for (const char* name : {"vllm-llama", "megatron-llama"}) {
    const WeightMap map = *WeightMap::Builtin(name, 128);
    std::string text = R"({"rules": [)";
    const auto quote = [](const std::string& s) {
      std::string out = "\"";
      for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        out += c;
      }
      return out + "\"";
    };
    for (size_t i = 0; i < map.rules().size(); ++i) {
      const WeightMapRule& r = map.rules()[i];
      if (i > 0) text += ", ";
      const char* kind = r.kind == Kind::kRename ? "rename"
                         : r.kind == Kind::kFuse ? "fuse"
                         : r.kind == Kind::kSplit ? "split"
                                                  : "pad";
      text += absl::StrCat("{\"", kind, "\": ");
      if (r.kind == Kind::kFuse) {
        text += "[";
        for (size_t k = 0; k < r.from.size(); ++k) text += (k ? ", " : "") + quote(r.from[k]);
        text += "]";
      } else {
        text += quote(r.from[0]);
      }
      if (r.kind == Kind::kSplit) {
        text += ", \"to\": [";
        for (size_t k = 0; k < r.to.size(); ++k) text += (k ? ", " : "") + quote(r.to[k]);
        text += "]";
      } else if (!r.to.empty()) {
        text += ", \"to\": " + quote(r.to[0]);
      }
      text += absl::StrCat(", \"dim\": ", r.dim, ", \"interleave\": \"",
                           r.interleave == Interleave::kShards ? "shards" : "groups",
                           "\", \"head_size\": ", r.head_size, ", \"groups\": ", r.groups,
                           ", \"multiple\": ", r.multiple, "}");
    }
    text += "]}";
    const WeightMap again = Json(text);
    ASSERT_EQ(again.rules().size(), map.rules().size()) << name;
    for (size_t i = 0; i < map.rules().size(); ++i) {
      EXPECT_TRUE(SameRule(again.rules()[i], map.rules()[i])) << name << " rule " << i;
    }
    EXPECT_EQ(again.Describe(), map.Describe()) << name;
  }
}

}  // namespace
}  // namespace sdrt
