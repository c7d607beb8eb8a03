// Single-process tests of the JSON form of weight maps (WeightMap::FromJson,
// core/distributed/weight_map.h): each kind of rule and its fields, empty rules and key
// order, and the documents refused (malformed, duplicate or unknown keys, fields of the
// wrong type, a rule of two kinds or none, more than 1 MiB), values checked as FromRules
// checks them. Maps made from rules are in weight_map_rules_test.cc.
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tests/core/distributed/weight_map_test_util.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;
using ::testing::HasSubstr;
using testing_weight_map::ExpectMatch;
using testing_weight_map::Json;
using testing_weight_map::JsonError;
using testing_weight_map::Map;
using testing_weight_map::Rename;
using testing_weight_map::Rule;
using testing_weight_map::SameRule;

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

TEST(WeightMapFromJson, ARegroupAndItsFields) {
  const WeightMap map = Json(R"json({"rules": [
    {"regroup": "decoder\\.layers\\.(?P<i>\\d+)\\.self_attention\\.linear_qkv\\.weight",
     "to": "model.layers.{i}.self_attn.qkv_proj.weight", "head_size": 128,
     "from_interleave": "groups", "sizes": [4096, 1024, 1024]},
    {"regroup": "gate_up", "to": "fc1", "from_interleave": "shards", "interleave": "groups",
     "groups": 1, "sizes": [0, 14336]}
  ]})json");
  ASSERT_EQ(map.rules().size(), 2u);
  WeightMapRule qkv = Rule(Kind::kRegroup,
                           {R"(decoder\.layers\.(?P<i>\d+)\.self_attention\.linear_qkv\.weight)"},
                           {"model.layers.{i}.self_attn.qkv_proj.weight"});
  qkv.head_size = 128;
  qkv.sizes = {4096, 1024, 1024};
  EXPECT_TRUE(SameRule(map.rules()[0], qkv));
  WeightMapRule fc1 = Rule(Kind::kRegroup, {"gate_up"}, {"fc1"});
  fc1.source_interleave = Interleave::kShards;
  fc1.interleave = Interleave::kGroups;
  fc1.groups = 1;
  fc1.sizes = {0, 14336};
  EXPECT_TRUE(SameRule(map.rules()[1], fc1));
  EXPECT_EQ(map.Describe(), Map({qkv, fc1}).Describe());
  ExpectMatch(map, "decoder.layers.5.self_attention.linear_qkv.weight", 0, 0,
              {"model.layers.5.self_attn.qkv_proj.weight"});

  const auto rule = [](const std::string& body) {
    return JsonError(absl::StrCat(R"({"rules": [)", body, "]}"));
  };
  EXPECT_THAT(rule(R"({"regroup": "a", "to": "b", "sizes": 8})"),
              HasSubstr("weight map rule 0: \"sizes\" must be an array of at most 16 integers"));
  EXPECT_THAT(rule(R"({"regroup": "a", "to": "b", "sizes": [8, "8"]})"),
              HasSubstr("\"sizes\" must be an integer"));
  EXPECT_THAT(rule(R"({"regroup": "a", "to": "b", "sizes": [8, 8], "from_interleave": "rows"})"),
              HasSubstr("\"from_interleave\" must be \"shards\" or \"groups\""));
  EXPECT_THAT(rule(R"({"regroup": "a", "to": "b", "sizes": [8]})"),
              HasSubstr("weight map rule 0 (regroup): 1 sizes; 2 to 16"));
  EXPECT_THAT(rule(R"({"regroup": "a", "to": "b", "sizes": [8, -8]})"),
              HasSubstr("weight map rule 0 (regroup): size -8 must lie in [0, 2^40]"));
  EXPECT_THAT(rule(R"({"regroup": ["a"], "to": "b", "sizes": [8, 8]})"),
              HasSubstr("\"regroup\" must be a string"));
  EXPECT_THAT(rule(R"({"fuse": ["a", "b"], "to": "c", "sizes": [8, 8]})"),
              HasSubstr("weight map rule 0 (fuse): sizes are a regroup's or a split's alone"));
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
              HasSubstr("weight map rule 0 (pad): head_size 0 and groups 0 must lie in "
                        "[0, 2^40], multiple 0 in [1, 2^40]"));
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
                        "\"split\", \"pad\", \"regroup\""));
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

}  // namespace
}  // namespace sdrt
