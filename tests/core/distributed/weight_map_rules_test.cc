// Single-process tests of weight maps made from rules (core/distributed/weight_map.h):
// FromRules' checks and their messages (each naming the rule's index and kind), what a map
// keeps of its rules, and the canonical text Describe (equal for equal maps, different for
// any field). The JSON form is in weight_map_json_test.cc, the match of a source name and
// the built-in maps in weight_map_match_test.cc; how a map moves bytes in
// weight_map_mpi_test.cc.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tests/core/distributed/weight_map_test_util.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;
using ::testing::HasSubstr;
using testing_weight_map::Error;
using testing_weight_map::ExpectMatch;
using testing_weight_map::Map;
using testing_weight_map::Match;
using testing_weight_map::Rename;
using testing_weight_map::Rule;
using testing_weight_map::SameRule;

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
              HasSubstr("weight map rule 0 (fuse): head_size -1 and groups 0 must lie in "
                        "[0, 2^40], multiple 1 in [1, 2^40]"));
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
  EXPECT_THAT(Error({split}), HasSubstr("weight map rule 0 (split): head_size 0 and groups -2"));

  WeightMapRule pad = Rule(Kind::kPad, {"a"}, {});
  pad.multiple = 0;
  EXPECT_THAT(Error({pad}), HasSubstr("weight map rule 0 (pad): head_size 0 and groups 0 must "
                                      "lie in [0, 2^40], multiple 0 in [1, 2^40]"));
  pad.multiple = -64;
  EXPECT_THAT(Error({pad}), HasSubstr("multiple -64 in [1, 2^40]"));
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

  // A name with a NUL byte would be written and then refused by every reader.
  EXPECT_THAT(Error({Rename("x", "y"), Rename("model\\.norm\\.weight", std::string("a\0b", 3))}),
              HasSubstr("weight map rule 1 (rename): a template holds a NUL byte"));

  std::vector<WeightMapRule> many(10000, Rename("a", "b"));
  EXPECT_TRUE(WeightMap::FromRules(many).ok());
  many.push_back(Rename("a", "b"));
  EXPECT_THAT(Error(many), HasSubstr("weight map: 10001 rules; at most 10000"));
}

// What a map's destination names go wrong on says which sources and rules are involved.
TEST(WeightMapFromRules, NamesTheSourcesOfAClash) {
  const auto one_part = [](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> {
    return 1;
  };
  const auto message = [&](const WeightMap& map, std::vector<SafetensorsTensorSpec> specs) {
    return std::string(map.DestinationTensors(specs, one_part).status().message());
  };
  // One rule making one name of two sources.
  EXPECT_THAT(message(Map({Rename("a\\..*", "x")}),
                      {{"a.1", DType::kBFloat16, {2}}, {"a.2", DType::kBFloat16, {2}}}),
              HasSubstr("'x' would be made twice: by rule 0 from 'a.1' and by rule 0 from 'a.2'"));
  // A fuse's component that an earlier rule takes.
  WeightMapRule fuse = Rule(Kind::kFuse, {"q", "k"}, {"qk"});
  EXPECT_THAT(message(Map({Rename("q", "q2"), fuse}),
                      {{"q", DType::kBFloat16, {2, 2}}, {"k", DType::kBFloat16, {2, 2}}}),
              HasSubstr("no source matches its component 0 ('q'): 'q' matches it, but rule 0 "
                        "takes it first (as its component 0)"));
}

// --- Describe ------------------------------------------------------------------------------

TEST(WeightMapFromRules, ASplitsSizesAreOnePerTemplate) {
  WeightMapRule split = Rule(Kind::kSplit, {"qkv"}, {"q", "k", "v"});
  split.interleave = Interleave::kGroups;
  split.sizes = {64, 16};
  EXPECT_THAT(Error({split}), HasSubstr("weight map rule 0 (split): 2 sizes; one per template"));
  split.sizes = {64, 16, -16};
  EXPECT_THAT(Error({split}), HasSubstr("weight map rule 0 (split): size -16 must lie in"));
  split.sizes = {64, 16, 16};
  // With them the destinations are known from the source alone: [q of group g; k; v] for
  // the 16 / 4 = 4 groups of head size 4.
  split.head_size = 4;
  const WeightMap map = Map({split});
  const absl::StatusOr<std::vector<SafetensorsTensorSpec>> specs =
      map.DestinationTensors({{"qkv", DType::kBFloat16, {96, 8}}},
                                      [](absl::string_view, const IntVector&, int)
                                          -> absl::StatusOr<int64_t> { return 1; });
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].name, "q");
  EXPECT_EQ((*specs)[0].shape, (IntVector{64, 8}));
  EXPECT_EQ((*specs)[2].shape, (IntVector{16, 8}));
  // Sizes that do not make the source are refused naming both.
  EXPECT_THAT(std::string(map.DestinationTensors({{"qkv", DType::kBFloat16, {100, 8}}},
                                                 [](absl::string_view, const IntVector&, int)
                                                     -> absl::StatusOr<int64_t> { return 1; })
                              .status()
                              .message()),
              HasSubstr("its dim 0 is 100; its sizes make 96"));
}

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
  const auto regroup = [](WeightMapRule& r) {
    r.kind = Kind::kRegroup;
    r.from = {r.from[0]};
    r.sizes = {64, 64};
  };
  with(regroup);
  with([&](WeightMapRule& r) {
    regroup(r);
    r.sizes = {64, 128};
  });
  with([&](WeightMapRule& r) {
    regroup(r);
    r.source_interleave = Interleave::kShards;
  });
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

}  // namespace
}  // namespace sdrt
