// ShardingPlan's PLAN.json reader (core/checkpoint/sharding_plan.h): FromJsonFile and
// FromJson, the rules, the default and mesh_ndim checked field by field, and the rules'
// hash an engine's layout records.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"
#include "sdrt/core/checkpoint/internal/sharding_plan_rule.h"
#include "sdrt/core/checkpoint/internal/strict_json.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/status_macros.h"
#define XXH_INLINE_ALL  // header-only use of libxxhash-dev
#include "xxhash.h"

namespace sdrt {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<std::vector<Placement>> ParsePlacementsJson(const Json& value,
                                                           const std::string& where) {
  std::vector<Placement> out;
  if (value.is_string()) {
    absl::StatusOr<std::vector<Placement>> parsed = ParsePlacements(value.get<std::string>());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", parsed.status().message()));
    }
    out = *std::move(parsed);
  } else if (value.is_array()) {
    for (const Json& item : value) {
      if (!item.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": placements must be strings like \"S(0)\", got ", item.dump()));
      }
      absl::StatusOr<Placement> p = ParsePlacement(item.get<std::string>());
      if (!p.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", p.status().message()));
      out.push_back(*p);
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": placements must be a string like \"[R, S(0)]\" or an array of strings, got ",
        value.dump()));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": an empty placement list"));
  }
  for (const Placement& p : out) {
    if (p.is_partial()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", p.ToString(),
                       " is not allowed in a checkpoint plan (a checkpoint holds values, not "
                       "pending reductions)"));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<ShardingPlan> ShardingPlan::FromJsonFile(const std::string& path) {
  absl::StatusOr<std::string> text = internal::ReadBoundedFile(path, internal::kMaxJsonFileBytes);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("plan file ", path, ": cannot be read: ", text.status().message()));
  }
  return FromJson(*text, path);
}

absl::StatusOr<ShardingPlan> ShardingPlan::FromJson(absl::string_view text,
                                                    absl::string_view source) {
  const std::string file = absl::StrCat("plan file ", source);
  absl::StatusOr<Json> parsed = internal::ParseStrictJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", parsed.status().message()));
  }
  Json doc = *std::move(parsed);
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": the top level must be an object"));
  }
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (it.key() != "rules" && it.key() != "default" && it.key() != "mesh_ndim" &&
        it.key() != "comment") {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": unknown field \"", it.key(),
                       "\" (expected rules, default, mesh_ndim, comment)"));
    }
  }
  auto rules = std::make_shared<std::vector<Rule>>();
  auto add_rule = [&](const std::string& pattern, const Json& placements,
                      size_t index) -> absl::Status {
    const std::string where = absl::StrCat(file, ": rule ", index, " (\"", pattern, "\")");
    Rule rule;
    rule.pattern = pattern;
    RE2::Options options;
    options.set_log_errors(false);
    auto regex = std::make_shared<const RE2>(pattern, options);
    if (!regex->ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": bad pattern (RE2 syntax): ", regex->error()));
    }
    rule.regex = std::move(regex);
    SDRT_ASSIGN_OR_RETURN(rule.placements, ParsePlacementsJson(placements, where));
    rules->push_back(std::move(rule));
    return absl::OkStatus();
  };
  if (doc.contains("rules")) {
    const Json& list = doc["rules"];
    if (list.is_array()) {
      for (size_t i = 0; i < list.size(); ++i) {
        const Json& r = list[i];
        if (!r.is_object() || !r.contains("pattern") || !r["pattern"].is_string() ||
            !r.contains("placements")) {
          return absl::InvalidArgumentError(absl::StrCat(
              file, ": rule ", i,
              " must be an object with a string \"pattern\" and \"placements\", got ", r.dump()));
        }
        for (auto field = r.begin(); field != r.end(); ++field) {
          if (field.key() != "pattern" && field.key() != "placements" && field.key() != "comment") {
            return absl::InvalidArgumentError(
                absl::StrCat(file, ": rule ", i, ": unknown field \"", field.key(),
                             "\" (expected pattern, placements, comment)"));
          }
        }
        SDRT_RETURN_IF_ERROR(add_rule(r["pattern"].get<std::string>(), r["placements"], i));
      }
    } else if (list.is_object()) {
      size_t i = 0;
      for (auto it = list.begin(); it != list.end(); ++it, ++i) {
        SDRT_RETURN_IF_ERROR(add_rule(it.key(), it.value(), i));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(file,
                       ": \"rules\" must be an array of {pattern, placements} or an "
                       "object of pattern: placements"));
    }
  }
  std::shared_ptr<std::vector<Placement>> fallback;
  if (doc.contains("default")) {
    SDRT_ASSIGN_OR_RETURN(std::vector<Placement> parsed,
                          ParsePlacementsJson(doc["default"], absl::StrCat(file, ": default")));
    fallback = std::make_shared<std::vector<Placement>>(std::move(parsed));
  }
  int ndim = 0;
  std::string ndim_from;
  auto agree = [&](size_t n, const std::string& what) -> absl::Status {
    if (ndim == 0) {
      ndim = static_cast<int>(n);
      ndim_from = what;
      return absl::OkStatus();
    }
    if (static_cast<int>(n) != ndim) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", what, " has ", n,
                                                     " placements but ", ndim_from, " has ", ndim,
                                                     " (one per mesh dim)"));
    }
    return absl::OkStatus();
  };
  if (doc.contains("mesh_ndim")) {
    const Json& m = doc["mesh_ndim"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": \"mesh_ndim\" must be an integer in [1, 64], got ", m.dump()));
    }
    ndim = static_cast<int>(m.get<int64_t>());
    ndim_from = "mesh_ndim";
  }
  for (size_t i = 0; i < rules->size(); ++i) {
    SDRT_RETURN_IF_ERROR(agree((*rules)[i].placements.size(),
                               absl::StrCat("rule ", i, " (\"", (*rules)[i].pattern, "\")")));
  }
  if (fallback != nullptr) {
    SDRT_RETURN_IF_ERROR(agree(fallback->size(), "default"));
  }
  if (ndim == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": no rule, default or mesh_ndim: the plan says nothing about the mesh"));
  }
  ShardingPlan plan;
  plan.kind_ = Kind::kCustom;
  plan.name_ = std::string(source);
  plan.rules_ = std::move(rules);
  plan.default_ = std::move(fallback);
  plan.mesh_ndim_ = ndim;
  doc.erase("comment");  // and each rule's: what the file says, not how it is annotated
  if (doc.contains("rules") && doc["rules"].is_array()) {
    for (Json& rule : doc["rules"]) rule.erase("comment");
  }
  const std::string compact = doc.dump();  // the rules, whatever their whitespace
  plan.rules_xxh64_ = XXH64(compact.data(), compact.size(), 0);
  return plan;
}

}  // namespace sdrt
