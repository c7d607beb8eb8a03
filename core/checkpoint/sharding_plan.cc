#include "sdrt/core/checkpoint/sharding_plan.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "re2/re2.h"
#include "sdrt/core/checkpoint/internal/strict_json.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#define XXH_INLINE_ALL  // header-only use of libxxhash-dev
#include "xxhash.h"

namespace sdrt {

struct ShardingPlan::Rule {
  std::string pattern;
  std::shared_ptr<const RE2> regex;  // compiled once, shared by copies of the plan
  std::vector<Placement> placements;
};

namespace {

using Json = nlohmann::ordered_json;

// Trailing-component patterns of the built-in tp plan, searched in the name in this order.
struct TpPattern {
  const char* regex;
  TpRole role;
};

const std::vector<std::pair<std::unique_ptr<RE2>, TpRole>>& TpPatterns() {
  static const auto* patterns = [] {
    const TpPattern kPatterns[] = {
        // Llama / Mistral / Qwen, and the fused tensors of vLLM-style engines (weight_map.h).
        // An FP8 weight's 128 x 128 block scales ("weight_scale_inv") are cut as it is.
        {R"((^|\.)(q_proj|k_proj|v_proj|gate_proj|up_proj|qkv_proj|gate_up_proj)\.(weight|bias|weight_scale_inv)$)",
         TpRole::kColumn},
        // DeepSeek's multi-head latent attention: the up-projections are column-parallel
        // (vLLM's ColumnParallelLinear); q_a_proj and kv_a_proj_with_mqa are replicated.
        {R"((^|\.)(q_b_proj|kv_b_proj)\.(weight|bias|weight_scale_inv)$)", TpRole::kColumn},
        // Megatron-Core: linear_qkv and linear_fc1 column-parallel, linear_proj and
        // linear_fc2 row-parallel, output_layer the vocabulary (its fused layer norms
        // replicated).
        {R"((^|\.)(linear_qkv|linear_fc1)\.(weight|bias)$)", TpRole::kColumn},
        {R"((^|\.)(linear_proj|linear_fc2)\.(weight|bias)$)", TpRole::kRow},
        {R"((^|\.)output_layer\.weight$)", TpRole::kVocab},
        {R"((^|\.)(o_proj|down_proj)\.(weight|bias|weight_scale_inv)$)", TpRole::kRow},
        {R"((^|\.)(embed_tokens|lm_head)\.weight$)", TpRole::kVocab},
        // BERT.
        {R"((^|\.)attention\.self\.(query|key|value)\.(weight|bias)$)", TpRole::kColumn},
        {R"((^|\.)intermediate\.dense\.(weight|bias)$)", TpRole::kColumn},
        {R"((^|\.)output\.dense\.(weight|bias)$)", TpRole::kRow},  // also attention.output
        {R"((^|\.)word_embeddings\.weight$)", TpRole::kVocab},
        // GPT-2 (Conv1D, [in, out]).
        {R"((^|\.)(c_attn|c_fc)\.(weight|bias)$)", TpRole::kConv1DColumn},
        {R"((^|\.)c_proj\.(weight|bias)$)", TpRole::kConv1DRow},
        {R"((^|\.)wte\.weight$)", TpRole::kVocab},
    };
    auto* out = new std::vector<std::pair<std::unique_ptr<RE2>, TpRole>>();
    for (const TpPattern& p : kPatterns) {
      out->emplace_back(std::make_unique<RE2>(p.regex), p.role);
    }
    return out;
  }();
  return *patterns;
}

std::string MeshShapeString(const DeviceMesh& mesh) { return absl::StrJoin(mesh.shape(), "x"); }

absl::Status NeedsMeshDims(absl::string_view plan, int needed, const DeviceMesh& mesh) {
  return absl::InvalidArgumentError(
      absl::StrCat("plan ", plan, " needs a ", needed, "-D mesh (",
                   plan == "fsdp-tp" ? "dp x tp" : "replicate x shard", "), got the ", mesh.ndim(),
                   "-D mesh ", MeshShapeString(mesh)));
}

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

absl::string_view TpRoleName(TpRole role) {
  switch (role) {
    case TpRole::kReplicate:
      return "replicate";
    case TpRole::kColumn:
      return "column";
    case TpRole::kRow:
      return "row";
    case TpRole::kConv1DColumn:
      return "conv1d-column";
    case TpRole::kConv1DRow:
      return "conv1d-row";
    case TpRole::kVocab:
      return "vocab";
  }
  return "invalid";
}

TpRole TpRoleOf(absl::string_view name) {
  for (const auto& [regex, role] : TpPatterns()) {
    if (RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *regex)) return role;
  }
  return TpRole::kReplicate;
}

Placement TpPlacement(TpRole role, int ndim) {
  if (ndim == 0) return Placement::Replicate();
  const bool weight = ndim >= 2;
  switch (role) {
    case TpRole::kReplicate:
      return Placement::Replicate();
    case TpRole::kColumn:
    case TpRole::kVocab:
      return Placement::Shard(0);
    case TpRole::kRow:
      return weight ? Placement::Shard(1) : Placement::Replicate();
    case TpRole::kConv1DColumn:
      return weight ? Placement::Shard(1) : Placement::Shard(0);
    case TpRole::kConv1DRow:
      return weight ? Placement::Shard(0) : Placement::Replicate();
  }
  return Placement::Replicate();
}

absl::StatusOr<ShardingPlan> ShardingPlan::Builtin(absl::string_view name) {
  ShardingPlan plan;
  if (name == "fsdp") {
    plan.kind_ = Kind::kFsdp;
  } else if (name == "hsdp") {
    plan.kind_ = Kind::kHsdp;
  } else if (name == "tp") {
    plan.kind_ = Kind::kTp;
  } else if (name == "fsdp-tp") {
    plan.kind_ = Kind::kFsdpTp;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown plan \"", name, "\": expected fsdp, hsdp, tp, fsdp-tp or a PLAN.json file"));
  }
  plan.name_ = std::string(name);
  return plan;
}

absl::StatusOr<ShardingPlan> ShardingPlan::FromSpec(const std::string& spec) {
  absl::StatusOr<ShardingPlan> builtin = Builtin(spec);
  if (builtin.ok()) return builtin;
  struct stat st;
  if (stat(spec.c_str(), &st) == 0 || absl::EndsWith(spec, ".json")) return FromJsonFile(spec);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown plan \"", spec,
                   "\": not fsdp, hsdp, tp or fsdp-tp, and no PLAN.json file of that name"));
}

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

absl::Status ShardingPlan::CheckMesh(const DeviceMesh& mesh) const {
  switch (kind_) {
    case Kind::kFsdp:
    case Kind::kTp:
      return absl::OkStatus();
    case Kind::kHsdp:
    case Kind::kFsdpTp:
      if (mesh.ndim() != 2) return NeedsMeshDims(name_, 2, mesh);
      return absl::OkStatus();
    case Kind::kCustom:
      if (mesh.ndim() != mesh_ndim_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "plan ", name_, " gives ", mesh_ndim_, " placements per tensor (a ", mesh_ndim_,
            "-D mesh), got the ", mesh.ndim(), "-D mesh ", MeshShapeString(mesh)));
      }
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Placement>> ShardingPlan::PlacementsFor(absl::string_view name,
                                                                   IntSpan shape,
                                                                   const DeviceMesh& mesh) const {
  SDRT_RETURN_IF_ERROR(CheckMesh(mesh));
  const int n = mesh.ndim();
  const int ndim = static_cast<int>(shape.size());
  if (ndim == 0) return std::vector<Placement>(n, Placement::Replicate());
  switch (kind_) {
    case Kind::kFsdp:
      return std::vector<Placement>(n, Placement::Shard(0));
    case Kind::kHsdp:
      return std::vector<Placement>{Placement::Replicate(), Placement::Shard(0)};
    case Kind::kTp: {
      std::vector<Placement> out(n, Placement::Replicate());
      out[n - 1] = TpPlacement(TpRoleOf(name), ndim);
      return out;
    }
    case Kind::kFsdpTp: {
      const Placement tp = TpPlacement(TpRoleOf(name), ndim);
      const int64_t tp_size = mesh.size(1);
      // _fsdp_param.py: split_factor = the number of shards the TP spec puts on FSDP's
      // shard dim (0); > 1 makes FSDP's placement a _StridedShard.
      const bool strided = tp.is_shard_like() && tp.dim() == 0 && tp_size > 1;
      return std::vector<Placement>{
          strided ? Placement::StridedShard(0, tp_size) : Placement::Shard(0), tp};
    }
    case Kind::kCustom: {
      const std::vector<Placement>* chosen = default_.get();
      std::string rule = "default";
      for (size_t i = 0; i < rules_->size(); ++i) {
        const Rule& r = (*rules_)[i];
        if (RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *r.regex)) {
          chosen = &r.placements;
          rule = absl::StrCat("rule ", i, " (\"", r.pattern, "\")");
          break;
        }
      }
      if (chosen == nullptr) return std::vector<Placement>(n, Placement::Replicate());
      for (const Placement& p : *chosen) {
        if (p.is_shard_like() && p.dim() >= ndim) {
          return absl::InvalidArgumentError(absl::StrCat(
              "plan ", name_, ": ", rule, " gives ", PlacementsToString(*chosen), " to tensor ",
              name, " of shape [", absl::StrJoin(shape, ", "), "], which has no dim ", p.dim()));
        }
      }
      return *chosen;
    }
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<Map> ShardingPlan::MetaStateDict(const std::vector<SafetensorsTensorSpec>& tensors,
                                                std::shared_ptr<const DeviceMesh> mesh,
                                                int64_t rank) const {
  if (mesh == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("plan ", name_, ": MetaStateDict: null mesh"));
  }
  Map local;
  if (!mesh->Coordinate(rank).has_value()) return local;
  local.Reserve(tensors.size());
  for (const SafetensorsTensorSpec& t : tensors) {
    if (local.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", name_, ": MetaStateDict: tensor ", t.name, " is listed twice"));
    }
    SDRT_ASSIGN_OR_RETURN(std::vector<Placement> placements, PlacementsFor(t.name, t.shape, *mesh));
    absl::StatusOr<IntVector> shape = ComputeLocalShape(t.shape, *mesh, placements, rank);
    if (!shape.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", name_, ": tensor ", t.name, ": ", shape.status().message()));
    }
    if (IsSubByte(t.dtype)) {  // its pieces whole bytes, the tensor named if not
      SDRT_RETURN_IF_ERROR(
          internal::CheckShardingCutsWholeBytes(t.name, t.dtype, t.shape, *mesh, placements));
    }
    SDRT_ASSIGN_OR_RETURN(Tensor meta, Tensor::Meta(*shape, t.dtype));
    SDRT_ASSIGN_OR_RETURN(DTensor d,
                          DTensor::Make(std::move(meta), mesh, std::move(placements), t.shape));
    local.Set(t.name, Value(std::move(d)));
  }
  return local;
}

}  // namespace sdrt
