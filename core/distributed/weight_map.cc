// WeightMap (core/distributed/weight_map.h): the rules checked and compiled, the match of a
// source name, and the built-in maps. The JSON form is weight_map_json.cc.
#include "sdrt/core/distributed/weight_map.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt {
namespace {

constexpr size_t kMaxRules = 10000;
constexpr size_t kMaxText = 4096;
constexpr size_t kMaxComponents = 16;
constexpr int kMaxDims = 12;
constexpr int64_t kMaxCount = int64_t{1} << 40;

// `text` as template pieces over the groups of `re`; InvalidArgument naming `where`.
absl::StatusOr<WeightMap::Compiled::Template> ParseTemplate(absl::string_view text, const RE2& re,
                                                            const std::string& where) {
  WeightMap::Compiled::Template out;
  std::string literal;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if ((c == '{' || c == '}') && i + 1 < text.size() && text[i + 1] == c) {
      literal += c;
      ++i;
      continue;
    }
    if (c == '}') {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": template '", text, "' has a '}' without its '{' (write '}}')"));
    }
    if (c != '{') {
      literal += c;
      continue;
    }
    const size_t end = text.find('}', i + 1);
    if (end == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": template '", text, "' has a '{' without its '}'"));
    }
    const absl::string_view name = text.substr(i + 1, end - i - 1);
    int group = -1;
    if (!name.empty() && absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) {
      if (!absl::SimpleAtoi(name, &group) || group < 1 ||
          group > re.NumberOfCapturingGroups()) {
        group = -1;
      }
    } else {
      const auto& named = re.NamedCapturingGroups();
      const auto it = named.find(std::string(name));
      if (it != named.end()) group = it->second;
    }
    if (group < 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": template '", text, "' names {",
                                                     name, "}, which its pattern '",
                                                     re.pattern(), "' does not capture"));
    }
    if (!literal.empty()) out.push_back({std::move(literal), -1});
    literal.clear();
    out.push_back({"", group});
    i = end;
  }
  if (!literal.empty()) out.push_back({std::move(literal), -1});
  return out;
}

absl::Status CheckCounts(size_t index, const WeightMapRule& rule) {
  const std::string where = internal::RuleName(index, rule);
  const bool many_from = rule.kind == WeightMapRule::Kind::kFuse;
  const bool many_to = rule.kind == WeightMapRule::Kind::kSplit;
  const size_t from = rule.from.size(), to = rule.to.size();
  if (many_from ? (from < 2 || from > kMaxComponents) : from != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", from, " patterns; ", many_from ? "2 to 16 (the components)" : "one"));
  }
  const bool to_ok = many_to ? (to >= 2 && to <= kMaxComponents)
                             : (to == 1 || (to == 0 && rule.kind == WeightMapRule::Kind::kPad));
  if (!to_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": ", to, " templates; ", many_to ? "2 to 16 (the components)" : "one"));
  }
  if (rule.dim < 0 || rule.dim >= kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": dim ", rule.dim, " not in [0, 12)"));
  }
  const bool regroup = rule.kind == WeightMapRule::Kind::kRegroup;
  if (regroup || (rule.kind == WeightMapRule::Kind::kSplit && !rule.sizes.empty())) {
    // A regroup's components, or a split's destinations (one size per template).
    const bool fits = regroup ? rule.sizes.size() >= 2 && rule.sizes.size() <= kMaxComponents
                              : rule.sizes.size() == to;
    if (!fits) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", rule.sizes.size(), " sizes; ",
                       regroup ? "2 to 16 (the components')" : "one per template"));
    }
    for (const int64_t n : rule.sizes) {
      if (n < 0 || n > kMaxCount) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": size ", n, " must lie in [0, 2^40]"));
      }
    }
  } else if (!rule.sizes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": sizes are a regroup's or a split's alone"));
  }
  if (rule.head_size < 0 || rule.head_size > kMaxCount || rule.groups < 0 ||
      rule.groups > kMaxCount || rule.multiple < 1 || rule.multiple > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": head_size ", rule.head_size, " and groups ", rule.groups,
                     " must lie in [0, 2^40], multiple ", rule.multiple, " in [1, 2^40]"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WeightMap> WeightMap::FromRules(std::vector<WeightMapRule> rules) {
  if (rules.size() > kMaxRules) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight map: ", rules.size(), " rules; at most ", kMaxRules));
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->rules.reserve(rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    WeightMapRule& rule = rules[i];
    SDRT_RETURN_IF_ERROR(CheckCounts(i, rule));
    const std::string where = internal::RuleName(i, rule);
    Compiled::Rule out;
    for (const std::string& pattern : rule.from) {
      if (pattern.size() > kMaxText) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a pattern of ", pattern.size(), " bytes; at most 4096"));
      }
      RE2::Options options;
      options.set_log_errors(false);
      auto re = std::make_unique<RE2>(pattern, options);
      if (!re->ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": pattern '", pattern, "': ", re->error()));
      }
      out.patterns.push_back(std::move(re));
    }
    for (const std::string& text : rule.to) {
      if (text.size() > kMaxText) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": a template of ", text.size(), " bytes; at most 4096"));
      }
      if (text.find('\0') != std::string::npos) {  // no reader takes such a name back
        return absl::InvalidArgumentError(absl::StrCat(where, ": a template holds a NUL byte"));
      }
    }
    // Each pattern's own parse of the templates (a fuse's components may number their
    // groups differently).
    for (const auto& re : out.patterns) {
      std::vector<Compiled::Template>& parsed = out.templates.emplace_back();
      for (const std::string& text : rule.to) {
        SDRT_ASSIGN_OR_RETURN(parsed.emplace_back(), ParseTemplate(text, *re, where));
      }
    }
    compiled->rules.push_back(std::move(out));
    compiled->rule_list.push_back(std::move(rule));
  }
  WeightMap map;
  map.compiled_ = std::move(compiled);
  return map;
}

const std::vector<WeightMapRule>& WeightMap::rules() const {
  static const std::vector<WeightMapRule> kNone;
  if (compiled_ == nullptr) return kNone;
  return compiled_->rule_list;
}

std::string WeightMap::Describe() const {
  // Each pattern and template is written with its length before it: they may hold any
  // byte ('|' is RE2's alternation), and a separator alone would let two different maps
  // read the same ("rename a|b to c" and "rename a to b|c").
  const auto strings = [](std::string& out, const std::vector<std::string>& list) {
    absl::StrAppend(&out, list.size());
    for (const std::string& s : list) absl::StrAppend(&out, " ", s.size(), ":", s);
  };
  std::string out;
  for (const WeightMapRule& r : rules()) {
    absl::StrAppend(&out, internal::RuleKindName(r.kind), "|");
    strings(out, r.from);
    absl::StrAppend(&out, "|");
    strings(out, r.to);
    absl::StrAppend(&out, "|", r.dim, "|",
                    r.interleave == WeightMapRule::Interleave::kShards ? "shards" : "groups", "|",
                    r.head_size, "|", r.groups, "|", r.multiple);
    if (r.kind == WeightMapRule::Kind::kRegroup) {
      absl::StrAppend(&out, "|from ",
                      r.source_interleave == WeightMapRule::Interleave::kShards ? "shards" : "groups",
                      "|", absl::StrJoin(r.sizes, ","));
    } else if (!r.sizes.empty()) {
      absl::StrAppend(&out, "|sizes ", absl::StrJoin(r.sizes, ","));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<WeightMap> WeightMap::Builtin(absl::string_view name, int64_t head_size) {
  if (head_size <= 0 || head_size > kMaxCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight map '", name, "': head size ", head_size, " must be in [1, 2^40]"));
  }
  using Kind = WeightMapRule::Kind;
  using Interleave = WeightMapRule::Interleave;
  std::vector<WeightMapRule> rules;
  const auto rule = [&](Kind kind, std::vector<std::string> from, std::vector<std::string> to,
                        Interleave interleave = Interleave::kShards, int64_t heads = 0,
                        int64_t groups = 0, int64_t multiple = 1) {
    WeightMapRule r;
    r.kind = kind;
    r.from = std::move(from);
    r.to = std::move(to);
    r.interleave = interleave;
    r.head_size = heads;
    r.groups = groups;
    r.multiple = multiple;
    rules.push_back(std::move(r));
  };
  if (name == "vllm-llama") {
    const std::string layer = R"(model\.layers\.(?P<i>\d+)\.)";
    for (const char* what : {"weight", "bias"}) {
      rule(Kind::kFuse,
           {absl::StrCat(layer, R"(self_attn\.q_proj\.)", what),
            absl::StrCat(layer, R"(self_attn\.k_proj\.)", what),
            absl::StrCat(layer, R"(self_attn\.v_proj\.)", what)},
           {absl::StrCat("model.layers.{i}.self_attn.qkv_proj.", what)}, Interleave::kShards,
           head_size);
    }
    rule(Kind::kFuse,
         {absl::StrCat(layer, R"(mlp\.gate_proj\.weight)"),
          absl::StrCat(layer, R"(mlp\.up_proj\.weight)")},
         {"model.layers.{i}.mlp.gate_up_proj.weight"});
    rule(Kind::kPad, {R"(model\.embed_tokens\.weight)"}, {}, Interleave::kShards, 0, 0, 64);
    rule(Kind::kPad, {R"(lm_head\.weight)"}, {}, Interleave::kShards, 0, 0, 64);
  } else if (name == "megatron-llama") {
    const std::string layer = R"(decoder\.layers\.(?P<i>\d+)\.)";
    const std::string hf = "model.layers.{i}.";
    for (const char* what : {"weight", "bias"}) {
      rule(Kind::kSplit, {absl::StrCat(layer, R"(self_attention\.linear_qkv\.)", what)},
           {absl::StrCat(hf, "self_attn.q_proj.", what), absl::StrCat(hf, "self_attn.k_proj.", what),
            absl::StrCat(hf, "self_attn.v_proj.", what)},
           Interleave::kGroups, head_size);
    }
    rule(Kind::kSplit, {absl::StrCat(layer, R"(mlp\.linear_fc1\.weight)")},
         {absl::StrCat(hf, "mlp.gate_proj.weight"), absl::StrCat(hf, "mlp.up_proj.weight")},
         Interleave::kGroups, 0, /*groups=*/1);
    const std::pair<const char*, const char*> renames[] = {
        {R"(self_attention\.linear_proj\.weight)", "self_attn.o_proj.weight"},
        {R"(mlp\.linear_fc2\.weight)", "mlp.down_proj.weight"},
        {R"(self_attention\.linear_qkv\.layer_norm_weight)", "input_layernorm.weight"},
        {R"(mlp\.linear_fc1\.layer_norm_weight)", "post_attention_layernorm.weight"},
    };
    for (const auto& [from, to] : renames) {
      rule(Kind::kRename, {absl::StrCat(layer, from)}, {absl::StrCat(hf, to)});
    }
    rule(Kind::kRename, {R"(embedding\.word_embeddings\.weight)"}, {"model.embed_tokens.weight"});
    rule(Kind::kRename, {R"(decoder\.final_layernorm\.weight)"}, {"model.norm.weight"});
    rule(Kind::kRename, {R"(output_layer\.weight)"}, {"lm_head.weight"});
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "no built-in weight map '", name, "' (there are vllm-llama and megatron-llama)"));
  }
  return FromRules(std::move(rules));
}

namespace internal {

std::optional<SourceMatch> MatchSource(const WeightMap::Compiled& map, absl::string_view name) {
  re2::StringPiece text(name.data(), name.size());
  std::vector<re2::StringPiece> groups;
  for (size_t r = 0; r < map.rules.size(); ++r) {
    const WeightMap::Compiled::Rule& rule = map.rules[r];
    for (size_t k = 0; k < rule.patterns.size(); ++k) {
      const RE2& re = *rule.patterns[k];
      groups.assign(static_cast<size_t>(re.NumberOfCapturingGroups()) + 1, {});
      if (!re.Match(text, 0, text.size(), RE2::ANCHOR_BOTH, groups.data(),
                    static_cast<int>(groups.size()))) {
        continue;
      }
      SourceMatch match;
      match.rule = static_cast<int>(r);
      match.component = static_cast<int>(k);
      for (const WeightMap::Compiled::Template& t : rule.templates[k]) {
        std::string& out = match.destinations.emplace_back();
        for (const WeightMap::Compiled::Piece& p : t) {
          const re2::StringPiece g =
              p.group < 0 ? re2::StringPiece(p.literal) : groups[static_cast<size_t>(p.group)];
          if (g.size() > kMaxDestinationNameBytes - out.size()) {
            match.too_long = true;  // a template repeating a long capture: no name that long
            break;
          }
          out.append(g.data(), g.size());
        }
        match.empty_name = match.empty_name || out.empty();
      }
      if (match.destinations.empty()) match.destinations.emplace_back(name);
      return match;
    }
  }
  return std::nullopt;
}

std::string ComponentTakenNote(const WeightMap::Compiled& map, int rule, size_t k,
                               const std::vector<absl::string_view>& names) {
  const RE2& pattern = *map.rules[static_cast<size_t>(rule)].patterns[k];
  for (absl::string_view name : names) {
    if (!RE2::FullMatch(re2::StringPiece(name.data(), name.size()), pattern)) continue;
    const std::optional<SourceMatch> taken = MatchSource(map, name);
    if (!taken.has_value() || taken->rule == rule) continue;  // its own: another tensor's
    return absl::StrCat(": '", name, "' matches it, but rule ", taken->rule,
                        " takes it first (as its component ", taken->component, ")");
  }
  return "";
}

const char* RuleKindName(WeightMapRule::Kind kind) {
  switch (kind) {
    case WeightMapRule::Kind::kRename: return "rename";
    case WeightMapRule::Kind::kFuse: return "fuse";
    case WeightMapRule::Kind::kSplit: return "split";
    case WeightMapRule::Kind::kPad: return "pad";
    case WeightMapRule::Kind::kRegroup: return "regroup";
  }
  return "?";
}

std::string RuleName(size_t index, const WeightMapRule& rule) {
  return absl::StrCat("weight map rule ", index, " (", RuleKindName(rule.kind), ")");
}

std::string RuleWhere(size_t index, const WeightMapRule& rule, absl::string_view tensor) {
  return absl::StrCat(RuleName(index, rule), " for '", tensor, "'");
}

const WeightMap::Compiled& CompiledOrEmpty(const WeightMap& map) {
  static const WeightMap::Compiled* const kNoRules = new WeightMap::Compiled();
  return map.compiled() != nullptr ? *map.compiled() : *kNoRules;
}

std::string WeightMapHash(const WeightMap& map) {
  const std::string text = map.Describe();
  return absl::StrCat(map.rules().size(), " rules, hash ",
                      absl::Hex(XXH64(text.data(), text.size(), 0)));
}

}  // namespace internal
}  // namespace sdrt
