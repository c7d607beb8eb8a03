// libFuzzer target: a weight map's JSON (WeightMap::FromJson, core/distributed/weight_map.h),
// then internal::MatchSource (internal/mapping/compiled_map.h) on fixed names and on the
// input's tail. A map that parses has its rules compiled one for one, describes the same
// twice and as the same rules through FromRules do; a match names a rule that exists, one
// of its patterns, and as many destinations as the rule makes (one per template of a split,
// else one).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sdrt::WeightMap> map = sdrt::WeightMap::FromJson(text);
  if (!map.ok()) return 0;
  const std::vector<sdrt::WeightMapRule>& rules = map->rules();
  SDRT_FUZZ_CHECK(map->compiled() != nullptr);
  const sdrt::WeightMap::Compiled& compiled = *map->compiled();
  SDRT_FUZZ_CHECK(compiled.rules.size() == rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    // Sizes are a regroup's, 2 to 16 of them; no other kind has any.
    const bool regroup = rules[r].kind == sdrt::WeightMapRule::Kind::kRegroup;
    SDRT_FUZZ_CHECK(regroup ? rules[r].sizes.size() >= 2 && rules[r].sizes.size() <= 16
                            : rules[r].sizes.empty());
    SDRT_FUZZ_CHECK(compiled.rules[r].patterns.size() == rules[r].from.size());
    SDRT_FUZZ_CHECK(compiled.rules[r].templates.size() == rules[r].from.size());
    for (const auto& parsed : compiled.rules[r].templates) {
      SDRT_FUZZ_CHECK(parsed.size() == rules[r].to.size());
    }
  }
  const std::string described = map->Describe();
  SDRT_FUZZ_CHECK(map->Describe() == described);
  absl::StatusOr<sdrt::WeightMap> again = sdrt::WeightMap::FromRules(rules);
  SDRT_FUZZ_CHECK(again.ok());
  SDRT_FUZZ_CHECK(again->Describe() == described);

  // Names: fixed ones the built-in maps and the seeds know, and the input's tail (any bytes).
  std::vector<std::string> names = {"model.layers.7.self_attn.k_proj.weight",
                                    "model.layers.3.mlp.up_proj.weight",
                                    "model.embed_tokens.weight",
                                    "model.norm.weight",
                                    "decoder.layers.2.self_attention.linear_qkv.weight",
                                    "decoder.layers.2.mlp.linear_fc2.weight",
                                    "lm_head.weight",
                                    "a",
                                    ""};
  names.emplace_back(text.substr(text.size() > 24 ? text.size() - 24 : 0));
  for (const std::string& name : names) {
    const std::optional<sdrt::internal::SourceMatch> m = sdrt::internal::MatchSource(compiled, name);
    if (!m.has_value()) continue;
    SDRT_FUZZ_CHECK(m->rule >= 0 && static_cast<size_t>(m->rule) < rules.size());
    const sdrt::WeightMapRule& rule = rules[static_cast<size_t>(m->rule)];
    SDRT_FUZZ_CHECK(m->component >= 0 && static_cast<size_t>(m->component) < rule.from.size());
    SDRT_FUZZ_CHECK(m->destinations.size() ==
                    (rule.kind == sdrt::WeightMapRule::Kind::kSplit ? rule.to.size() : 1));
    if (rule.to.empty()) SDRT_FUZZ_CHECK(m->destinations[0] == name);
    // The first rule that matches wins: no earlier rule's pattern matches the name.
    for (size_t r = 0; r < static_cast<size_t>(m->rule); ++r) {
      for (const auto& re : compiled.rules[r].patterns) {
        SDRT_FUZZ_CHECK(!RE2::FullMatch(name, *re));
      }
    }
  }
  return 0;
}
