// Parallel layouts: where every tensor of a whole model lives when a training or serving
// framework lays it out over a world of ranks with tensor (tp), pipeline (pp), expert (ep)
// and data (dp) parallelism. A ShardingPlan (sharding_plan.h) gives placements on one mesh
// that holds every tensor; a parallel layout gives each tensor its own mesh (the ranks of
// its pipeline stage, or of its expert's owners) and placements on it, as Megatron-LM and
// vLLM hold a model. What it builds is what PlanReshard and BindReshard take on either side
// (a rank lists the tensors whose mesh holds it), and the descriptors a planner of the
// whole world takes. docs/LAYOUTS.md draws each rule.
//
// Descriptions ("FRAMEWORK:key=value,..."; sizes are whole numbers >= 1):
//   megatron:tp=T,pp=P[,dp=D][,ep=E][,etp=X]  Megatron-Core's default rank order
//        (tp fastest, then dp, then pp): rank = (p * D + d) * T + t.
//   vllm:tp=T[,pp=P][,dp=D][,ep=E]            vLLM's engines: D replicas of a T x P engine,
//        rank = (d * P + p) * T + t; ep only 1 or D * T (enable_expert_parallel).
//   fsdp:dp=D                                 the fsdp plan on a mesh of D ranks.
//   fsdp-tp:dp=D,tp=T                         the fsdp-tp plan on a D x T mesh.
// When dp is left out it is the world size over tp x pp (the world size must then be
// given); ep defaults to 1; etp (the experts' own tensor parallelism, Megatron's
// expert_tensor_parallel_size) to tp when ep is 1 and to 1 otherwise, as the MoE recipes
// of NeMo set it. etp x ep must divide dp x tp: NeMo-RL's Qwen3-235B trainer,
// "megatron:tp=4,pp=8,ep=16" on 128 ranks, has dp 4 and 16 ranks per stage, one per ep rank.
//
// The rules (megatron and vllm):
//   * Pipeline stages own contiguous layer ranges: with L layers (the largest index N of a
//     "layers.N." / "layer.N." / "h.N." / "blocks.N." component, plus one), stage s holds
//     layers [floor(s L / P), floor((s + 1) L / P)). A tensor outside the layers goes to the
//     last stage when it is the head or the final norm (a component "lm_head" or
//     "output_layer", or "norm", "ln_f", "final_layernorm" or "final_layer_norm" just
//     before the last), else to the first (embeddings).
//   * Tied embeddings: with pp > 1 and no head tensor in the model (GPT-2's wte is its
//     head too), the token embedding (a component "embed_tokens", "wte" or
//     "word_embeddings" outside the layers) lives on the first and the last stage, as vLLM
//     and Megatron keep it there: a (pp, dp, tp) mesh of size 2 on pp (the first stage's
//     ranks, then the last's) with [Replicate, Replicate, tp placement].
//   * A dense tensor lives on its stage's dp x tp ranks as a (dp, tp) mesh with placements
//     [Replicate, the tp plan's placement of its name] (TpRoleOf, TpPlacement).
//   * Experts: the stage's dp x tp ranks, in the order above, are cut as (edp, ep, etp),
//     etp fastest. A per-expert tensor ("experts.K." in its name) of a layer with E experts
//     (the largest K there, plus one; E a multiple of ep) belongs to ep rank K / (E / ep)
//     and lives on that rank's (edp, etp) ranks with [Replicate, tp placement]; a stacked
//     one ("experts." then a name, dim 0 the E experts) lives on the (edp, ep, etp) mesh
//     with [Replicate, Shard(0), Replicate]. Shared experts and routers are dense.
//   * 0-dim tensors are Replicate on every mesh dim.
#ifndef SDRT_CORE_CHECKPOINT_PARALLEL_LAYOUT_H_
#define SDRT_CORE_CHECKPOINT_PARALLEL_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"

namespace sdrt SDRT_API {

// The largest layer or expert index a tensor name may carry ("layers.N.", "experts.K.").
inline constexpr int64_t kMaxLayoutIndex = int64_t{1} << 20;
// The most dims of a tensor a layout places (a header may list millions; the reshard
// planner takes 12).
inline constexpr size_t kMaxLayoutDims = 64;

// One tensor's home under a layout: the ranks that hold it and how.
struct LaidOutTensor {
  std::shared_ptr<const DeviceMesh> mesh;  // shared by the tensors of one stage and kind
  std::vector<Placement> placements;       // one per mesh dim
};

class ParallelLayout {
 public:
  enum class Framework : uint8_t { kMegatron, kVllm, kFsdp, kFsdpTp };

  // Parses a description (above) for a world of `world_size` ranks (0: not known, then dp
  // must be given). InvalidArgument naming the description and what is wrong: an unknown
  // framework or key, a key given twice or not taken by the framework, a size that is not
  // a whole number in [1, kMaxMeshRanks], a world above kMaxMeshRanks, dp left out without
  // a world size, a world size that tp x pp (x dp) does not divide or equal, etp x ep not
  // dividing dp x tp, vLLM's ep other than 1 or dp x tp.
  static absl::StatusOr<ParallelLayout> Parse(absl::string_view spec, int64_t world_size = 0);

  // Whether `spec` names a framework and a colon ("megatron:..."): a layout description
  // rather than a plan name or a PLAN.json path.
  static bool IsDescription(absl::string_view spec);

  Framework framework() const { return framework_; }
  int64_t tp() const { return tp_; }
  int64_t pp() const { return pp_; }
  int64_t dp() const { return dp_; }
  int64_t ep() const { return ep_; }
  int64_t etp() const { return etp_; }
  int64_t world_size() const { return tp_ * pp_ * dp_; }
  // Every size spelled out: "megatron:tp=4,pp=8,dp=4,ep=16,etp=1".
  std::string ToString() const;
  // The same layout with one pipeline stage (pp 1): every tensor cut as here, on the first
  // stage's ranks, for what a cut does not need the model's layers for (Place of one
  // tensor alone).
  ParallelLayout WithOneStage() const {
    ParallelLayout one = *this;
    one.pp_ = 1;
    return one;
  }

  // The home of each of `tensors` (a model's or a checkpoint's list, in order; no data),
  // one per tensor. Meshes are over global ranks first_rank .. first_rank + world_size() - 1
  // (first_rank > 0: the layout's ranks follow another's, as an engine's follow its
  // trainer's in one world) and shared between tensors of one stage and kind (so a planner
  // keys them once). InvalidArgument naming the tensor for: a layer or expert index above
  // kMaxLayoutIndex, fewer layers than pipeline stages, a layer's expert count (or a stacked
  // tensor's dim 0) that ep does not divide, a 0-dim stacked expert tensor, a tensor of more
  // than kMaxLayoutDims dims; fsdp and
  // fsdp-tp: ShardingPlan::PlacementsFor's; a first_rank below 0 or putting the last rank
  // above kMaxMeshRanks.
  absl::StatusOr<std::vector<LaidOutTensor>> Place(
      const std::vector<SafetensorsTensorSpec>& tensors, int64_t first_rank = 0) const;

  // What global `rank` holds of `tensors` under the layout placed from `first_rank`
  // (Place), before any byte is loaded: a flat state dict of a DTensor with a meta local
  // (the local shape, no memory) for each tensor whose mesh holds `rank`, in order; the
  // others are left out (what PlanReshard takes from a rank that receives nothing of them):
  // a rank outside the layout's ranks (a trainer's rank, for an engine placed after it)
  // gets an empty map. The same as ShardingPlan::MetaStateDict for fsdp and fsdp-tp.
  // Errors: Place's; InvalidArgument for a negative rank, a name listed twice or a sub-byte
  // tensor cut inside a byte (CheckShardingCutsWholeBytes, naming it).
  absl::StatusOr<Map> MetaStateDict(const std::vector<SafetensorsTensorSpec>& tensors, int64_t rank,
                                    int64_t first_rank = 0) const;

 private:
  ParallelLayout() = default;

  Framework framework_ = Framework::kMegatron;
  int64_t tp_ = 1;
  int64_t pp_ = 1;
  int64_t dp_ = 1;
  int64_t ep_ = 1;
  int64_t etp_ = 1;
};

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_PARALLEL_LAYOUT_H_
