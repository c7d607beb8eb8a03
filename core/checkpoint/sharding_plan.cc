#include "sdrt/core/checkpoint/sharding_plan.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "re2/re2.h"
#include "sdrt/core/checkpoint/internal/meta_dtensor.h"
#include "sdrt/core/checkpoint/internal/sharding_plan_rule.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

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
  const std::string owner = absl::StrCat("plan ", name_);  // for errors
  for (const SafetensorsTensorSpec& t : tensors) {
    if (local.contains(t.name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan ", name_, ": MetaStateDict: tensor ", t.name, " is listed twice"));
    }
    SDRT_ASSIGN_OR_RETURN(std::vector<Placement> placements, PlacementsFor(t.name, t.shape, *mesh));
    SDRT_ASSIGN_OR_RETURN(DTensor d,
                          internal::MetaDTensor(t, mesh, std::move(placements), rank, owner));
    local.Set(t.name, Value(std::move(d)));
  }
  return local;
}

}  // namespace sdrt
