// Single-process tests of the match of one source name against a weight map
// (internal::MatchSource, internal/mapping/compiled_map.h): the first matching rule wins,
// the whole name must match, named and numbered captures, a fuse's component, a split's
// destinations, a pad's name; and the built-in maps (WeightMap::Builtin, vllm-llama and
// megatron-llama): their names and head sizes, what each rule matches, and their JSON
// round trip. Maps made from rules are in weight_map_rules_test.cc.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tests/core/distributed/weight_map_test_util.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_weight_map::ExpectMatch;
using testing_weight_map::Json;
using testing_weight_map::Map;
using testing_weight_map::Match;
using testing_weight_map::Rename;
using testing_weight_map::Rule;
using testing_weight_map::SameRule;

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

// A template of empty captures makes an empty name: marked, and refused by the map's users
// (DestinationTensors here) naming the rule and tensor.
TEST(WeightMapMatch, AnEmptyNameIsMarkedAndRefused) {
  const WeightMap map = Map({Rename("x(.*)", "{1}")});
  const std::optional<internal::SourceMatch> m = Match(map, "x");
  ASSERT_TRUE(m.has_value());
  EXPECT_TRUE(m->empty_name);
  EXPECT_FALSE(Match(map, "xy")->empty_name);
  const absl::StatusOr<std::vector<SafetensorsTensorSpec>> out = map.DestinationTensors(
      {{"x", DType::kFloat32, {2}}},
      [](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> { return 1; });
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("weight map rule 0 (rename) for 'x': makes an empty name"),
            std::string::npos)
      << out.status();
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
