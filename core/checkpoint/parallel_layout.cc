#include "sdrt/core/checkpoint/parallel_layout.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sdrt/core/checkpoint/internal/meta_dtensor.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// Descriptions longer than this are refused before they are split.
constexpr size_t kMaxDescriptionBytes = 256;

struct FrameworkName {
  absl::string_view name;
  ParallelLayout::Framework framework;
  absl::string_view keys;  // the keys it takes
};
constexpr FrameworkName kFrameworks[] = {
    {"megatron", ParallelLayout::Framework::kMegatron, "tp,pp,dp,ep,etp"},
    {"vllm", ParallelLayout::Framework::kVllm, "tp,pp,dp,ep"},
    {"fsdp", ParallelLayout::Framework::kFsdp, "dp"},
    {"fsdp-tp", ParallelLayout::Framework::kFsdpTp, "dp,tp"},
};

const FrameworkName* FindFramework(absl::string_view name) {
  for (const FrameworkName& f : kFrameworks) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

// What a tensor's name says of where it lives.
struct NameFacts {
  int64_t layer = -1;   // outside the layers
  int64_t expert = -1;  // not a per-expert tensor
  bool stacked_experts = false;
  bool final_part = false;       // the head or the final norm
  bool head = false;             // the head (lm_head, output_layer)
  bool token_embedding = false;  // embed_tokens, wte, word_embeddings
};

absl::StatusOr<NameFacts> FactsOf(absl::string_view name) {
  NameFacts facts;
  const std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  const size_t n = parts.size();
  const auto index = [&](size_t i, int64_t& out) -> absl::Status {
    if (!absl::SimpleAtoi(parts[i], &out) || out > kMaxLayoutIndex) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': index ", parts[i], " above ", kMaxLayoutIndex));
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i + 1 < n; ++i) {
    const absl::string_view p = parts[i];
    if (facts.layer < 0 && (p == "layers" || p == "layer" || p == "h" || p == "blocks") &&
        AllDigits(parts[i + 1])) {
      SDRT_RETURN_IF_ERROR(index(i + 1, facts.layer));
    } else if (p == "experts" && facts.expert < 0 && !facts.stacked_experts) {
      // Megatron-Core's SequentialMLP: "experts.local_experts.K." (K global in its
      // checkpoints).
      const size_t k = parts[i + 1] == "local_experts" && i + 2 < n ? i + 2 : i + 1;
      if (AllDigits(parts[k])) {
        SDRT_RETURN_IF_ERROR(index(k, facts.expert));
      } else {
        facts.stacked_experts = true;
      }
    }
  }
  for (const absl::string_view p : parts) {
    if (p == "lm_head" || p == "output_layer") facts.final_part = facts.head = true;
    if (facts.layer < 0 && (p == "embed_tokens" || p == "wte" || p == "word_embeddings")) {
      facts.token_embedding = true;
    }
  }
  if (n >= 2) {
    const absl::string_view before_last = parts[n - 2];
    if (before_last == "norm" || before_last == "ln_f" || before_last == "final_layernorm" ||
        before_last == "final_layer_norm") {
      facts.final_part = true;
    }
  }
  return facts;
}

// Placements on one mesh for every tensor: the fsdp and fsdp-tp frameworks.
absl::StatusOr<std::vector<LaidOutTensor>> PlaceOnOneMesh(
    const ParallelLayout& layout, const std::vector<SafetensorsTensorSpec>& tensors,
    int64_t first_rank) {
  const bool two_d = layout.framework() == ParallelLayout::Framework::kFsdpTp;
  SDRT_ASSIGN_OR_RETURN(ShardingPlan plan, ShardingPlan::Builtin(two_d ? "fsdp-tp" : "fsdp"));
  const IntVector shape = two_d ? IntVector{layout.dp(), layout.tp()} : IntVector{layout.dp()};
  std::vector<std::string> names = {"dp"};
  if (two_d) names.push_back("tp");
  std::vector<int64_t> ranks(static_cast<size_t>(layout.world_size()));
  for (size_t r = 0; r < ranks.size(); ++r) ranks[r] = first_rank + static_cast<int64_t>(r);
  SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(shape, std::move(ranks), names));
  auto shared = std::make_shared<const DeviceMesh>(std::move(mesh));
  std::vector<LaidOutTensor> out;
  out.reserve(tensors.size());
  for (const SafetensorsTensorSpec& t : tensors) {
    SDRT_ASSIGN_OR_RETURN(std::vector<Placement> placements,
                          plan.PlacementsFor(t.name, t.shape, *shared));
    out.push_back({shared, std::move(placements)});
  }
  return out;
}

}  // namespace

bool ParallelLayout::IsDescription(absl::string_view spec) {
  const size_t colon = spec.find(':');
  return colon != absl::string_view::npos && FindFramework(spec.substr(0, colon)) != nullptr;
}

absl::StatusOr<ParallelLayout> ParallelLayout::Parse(absl::string_view spec, int64_t world_size) {
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel layout \"", spec.substr(0, kMaxDescriptionBytes), "\": ", why));
  };
  if (spec.size() > kMaxDescriptionBytes) {
    return bad(absl::StrCat("longer than ", kMaxDescriptionBytes, " bytes"));
  }
  const size_t colon = spec.find(':');
  const FrameworkName* framework =
      colon == absl::string_view::npos ? nullptr : FindFramework(spec.substr(0, colon));
  if (framework == nullptr) {
    return bad("expected megatron:, vllm:, fsdp: or fsdp-tp: and key=value sizes");
  }
  if (world_size < 0 || world_size > kMaxMeshRanks) {
    return bad(absl::StrCat("a world of ", world_size, " ranks"));
  }
  ParallelLayout layout;
  layout.framework_ = framework->framework;
  std::optional<int64_t> dp;
  absl::flat_hash_map<std::string, int64_t> given;
  const absl::string_view rest = spec.substr(colon + 1);
  if (!rest.empty()) {
    for (absl::string_view item : absl::StrSplit(rest, ',')) {
      const std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(item, absl::MaxSplits('=', 1));
      const std::vector<absl::string_view> keys = absl::StrSplit(framework->keys, ',');
      if (std::find(keys.begin(), keys.end(), kv.first) == keys.end()) {
        return bad(absl::StrCat("\"", item, "\": ", framework->name, " takes ", framework->keys));
      }
      int64_t value = 0;
      if (!AllDigits(kv.second) || !absl::SimpleAtoi(kv.second, &value) || value < 1 ||
          value > kMaxMeshRanks) {
        return bad(absl::StrCat(kv.first, " must be a whole number in [1, ", kMaxMeshRanks,
                                "], got \"", kv.second, "\""));
      }
      if (!given.emplace(std::string(kv.first), value).second) {
        return bad(absl::StrCat(kv.first, " is given twice"));
      }
    }
  }
  const auto get = [&given](absl::string_view key) -> std::optional<int64_t> {
    const auto it = given.find(key);
    return it == given.end() ? std::nullopt : std::optional<int64_t>(it->second);
  };
  layout.tp_ = get("tp").value_or(1);
  layout.pp_ = get("pp").value_or(1);
  dp = get("dp");
  const int64_t tp_pp = layout.tp_ * layout.pp_;  // each <= 2^20: no overflow
  if (tp_pp > kMaxMeshRanks) return bad(absl::StrCat("more than ", kMaxMeshRanks, " ranks"));
  if (!dp.has_value()) {
    if (world_size == 0) return bad("dp is left out and the world size is not known");
    if (world_size % tp_pp != 0) {
      return bad(absl::StrCat("tp x pp = ", tp_pp, " does not divide the world of ", world_size,
                              " ranks"));
    }
    dp = world_size / tp_pp;
  }
  layout.dp_ = *dp;
  if (tp_pp * layout.dp_ > kMaxMeshRanks) {
    return bad(absl::StrCat("more than ", kMaxMeshRanks, " ranks"));
  }
  if (world_size != 0 && layout.world_size() != world_size) {
    return bad(
        absl::StrCat("it spans ", layout.world_size(), " ranks, the world has ", world_size));
  }
  layout.ep_ = get("ep").value_or(1);
  layout.etp_ = get("etp").value_or(layout.ep_ == 1 ? layout.tp_ : 1);
  const int64_t stage_ranks = layout.dp_ * layout.tp_;
  // vLLM's own rule first: it has no etp to name.
  if (layout.framework_ == Framework::kVllm && layout.ep_ != 1 && layout.ep_ != stage_ranks) {
    return bad(
        absl::StrCat("vLLM's expert parallelism spans dp x tp: ep must be 1 or ", stage_ranks));
  }
  if (layout.ep_ * layout.etp_ > stage_ranks || stage_ranks % (layout.ep_ * layout.etp_) != 0) {
    return bad(absl::StrCat("etp x ep = ", layout.etp_, " x ", layout.ep_,
                            " does not divide dp x tp = ", stage_ranks));
  }
  return layout;
}

std::string ParallelLayout::ToString() const {
  switch (framework_) {
    case Framework::kMegatron:
      return absl::StrCat("megatron:tp=", tp_, ",pp=", pp_, ",dp=", dp_, ",ep=", ep_,
                          ",etp=", etp_);
    case Framework::kVllm:
      return absl::StrCat("vllm:tp=", tp_, ",pp=", pp_, ",dp=", dp_, ",ep=", ep_);
    case Framework::kFsdp:
      return absl::StrCat("fsdp:dp=", dp_);
    case Framework::kFsdpTp:
      return absl::StrCat("fsdp-tp:dp=", dp_, ",tp=", tp_);
  }
  return "";
}

absl::StatusOr<std::vector<LaidOutTensor>> ParallelLayout::Place(
    const std::vector<SafetensorsTensorSpec>& tensors, int64_t first_rank) const {
  if (first_rank < 0 || first_rank > kMaxMeshRanks - world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("parallel layout ", ToString(), ": first rank ",
                                                   first_rank, " outside [0, ",
                                                   kMaxMeshRanks - world_size(), "]"));
  }
  for (const SafetensorsTensorSpec& t : tensors) {
    if (t.shape.size() > kMaxLayoutDims) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel layout ", ToString(), ": tensor '", t.name, "' has ", t.shape.size(),
          " dims; a layout places tensors of at most ", kMaxLayoutDims));
    }
  }
  if (framework_ == Framework::kFsdp || framework_ == Framework::kFsdpTp) {
    return PlaceOnOneMesh(*this, tensors, first_rank);
  }
  std::vector<NameFacts> facts;
  facts.reserve(tensors.size());
  int64_t layers = 0;
  bool has_head = false;
  absl::flat_hash_map<int64_t, int64_t> experts_of_layer;  // per-expert tensors' count
  for (const SafetensorsTensorSpec& t : tensors) {
    SDRT_ASSIGN_OR_RETURN(NameFacts f, FactsOf(t.name));
    layers = std::max(layers, f.layer + 1);
    has_head = has_head || f.head;
    if (f.expert >= 0) {
      int64_t& count = experts_of_layer[f.layer];
      count = std::max(count, f.expert + 1);
    }
    facts.push_back(f);
  }
  if (pp_ > 1 && layers < pp_) {
    return absl::InvalidArgumentError(absl::StrCat("parallel layout ", ToString(), ": pp=", pp_,
                                                   " needs at least ", pp_,
                                                   " layers, the model has ", layers));
  }
  // A stage's local rank l = d * tp + t (d < dp, t < tp) as a global rank.
  const auto stage_rank = [this, first_rank](int64_t stage, int64_t l) {
    const int64_t d = l / tp_;
    const int64_t t = l % tp_;
    return first_rank + (framework_ == Framework::kMegatron ? (stage * dp_ + d) * tp_ + t
                                                            : (d * pp_ + stage) * tp_ + t);
  };
  const int64_t edp = dp_ * tp_ / (ep_ * etp_);
  // Meshes by (kind, stage, expert owner): 0 dense, 1 one ep rank's experts, 2 stacked, 3 the
  // first and the last stage together (a head tied to the token embedding).
  absl::flat_hash_map<std::tuple<int, int64_t, int64_t>, std::shared_ptr<const DeviceMesh>> meshes;
  const auto mesh_of = [&](int kind, int64_t stage,
                           int64_t owner) -> absl::StatusOr<std::shared_ptr<const DeviceMesh>> {
    std::shared_ptr<const DeviceMesh>& mesh = meshes[{kind, stage, owner}];
    if (mesh != nullptr) return mesh;
    IntVector shape;
    std::vector<std::string> names;
    std::vector<int64_t> ranks;
    if (kind == 0) {
      shape = {dp_, tp_};
      names = {"dp", "tp"};
      for (int64_t l = 0; l < dp_ * tp_; ++l) ranks.push_back(stage_rank(stage, l));
    } else if (kind == 1) {
      shape = {edp, etp_};
      names = {"edp", "etp"};
      for (int64_t e = 0; e < edp; ++e) {
        for (int64_t x = 0; x < etp_; ++x)
          ranks.push_back(stage_rank(stage, (e * ep_ + owner) * etp_ + x));
      }
    } else if (kind == 2) {
      shape = {edp, ep_, etp_};
      names = {"edp", "ep", "etp"};
      for (int64_t l = 0; l < dp_ * tp_; ++l) ranks.push_back(stage_rank(stage, l));
    } else {
      shape = {2, dp_, tp_};
      names = {"pp", "dp", "tp"};
      for (const int64_t s : {int64_t{0}, pp_ - 1}) {
        for (int64_t l = 0; l < dp_ * tp_; ++l) ranks.push_back(stage_rank(s, l));
      }
    }
    SDRT_ASSIGN_OR_RETURN(DeviceMesh made, DeviceMesh::Create(shape, std::move(ranks), names));
    mesh = std::make_shared<const DeviceMesh>(std::move(made));
    return mesh;
  };
  std::vector<LaidOutTensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensorSpec& t = tensors[i];
    const NameFacts& f = facts[i];
    const int ndim = static_cast<int>(t.shape.size());
    const auto where = [&] {
      return absl::StrCat("parallel layout ", ToString(), ": tensor '", t.name, "': ");
    };
    const int64_t stage = f.layer >= 0   ? ((f.layer + 1) * pp_ + layers - 1) / layers - 1
                          : f.final_part ? pp_ - 1
                                         : 0;
    const Placement tp_placement = TpPlacement(TpRoleOf(t.name), ndim);
    LaidOutTensor laid;
    if (f.expert >= 0) {
      const int64_t count = experts_of_layer[f.layer];
      if (count % ep_ != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where(), "its layer has ", count, " experts, which ep=", ep_, " does not divide"));
      }
      SDRT_ASSIGN_OR_RETURN(laid.mesh, mesh_of(1, stage, f.expert / (count / ep_)));
      laid.placements = {Placement::Replicate(), tp_placement};
    } else if (f.stacked_experts) {
      if (ndim == 0 || t.shape[0] % ep_ != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where(), "stacked experts need dim 0 a multiple of ep=", ep_,
                         ", the shape is ", ShapeToString(t.shape)));
      }
      SDRT_ASSIGN_OR_RETURN(laid.mesh, mesh_of(2, stage, 0));
      laid.placements = {Placement::Replicate(), Placement::Shard(0), Placement::Replicate()};
    } else if (f.token_embedding && !has_head && pp_ > 1) {
      // No head of its own: the last stage's output layer is this tensor (tied embeddings,
      // as vLLM and Megatron keep a copy there).
      SDRT_ASSIGN_OR_RETURN(laid.mesh, mesh_of(3, 0, 0));
      laid.placements = {Placement::Replicate(), Placement::Replicate(), tp_placement};
    } else {
      SDRT_ASSIGN_OR_RETURN(laid.mesh, mesh_of(0, stage, 0));
      laid.placements = {Placement::Replicate(), tp_placement};
    }
    if (ndim == 0) laid.placements.assign(laid.placements.size(), Placement::Replicate());
    out.push_back(std::move(laid));
  }
  return out;
}

absl::StatusOr<Map> ParallelLayout::MetaStateDict(const std::vector<SafetensorsTensorSpec>& tensors,
                                                  int64_t rank, int64_t first_rank) const {
  if (rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallel layout ", ToString(), ": rank ", rank, " is negative"));
  }
  SDRT_ASSIGN_OR_RETURN(std::vector<LaidOutTensor> placed, Place(tensors, first_rank));
  Map local;
  const std::string owner = absl::StrCat("parallel layout ", ToString());  // for errors
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsTensorSpec& t = tensors[i];
    LaidOutTensor& laid = placed[i];
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parallel layout ", ToString(), ": tensor ", t.name, " is listed twice"));
    }
    if (!laid.mesh->Coordinate(rank).has_value()) continue;
    SDRT_ASSIGN_OR_RETURN(
        DTensor d,
        internal::MetaDTensor(t, std::move(laid.mesh), std::move(laid.placements), rank, owner));
    local.Set(t.name, Value(std::move(d)));
  }
  return local;
}

}  // namespace sdrt
