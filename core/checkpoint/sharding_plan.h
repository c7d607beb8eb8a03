// Sharding plans: which placements each tensor of a full state dict gets on a DeviceMesh,
// as the common PyTorch parallelisms lay a model out. Used by WriteShardedCheckpoint
// (core/checkpoint/sharded_checkpoint.h), `sdrt shard`, and by MetaStateDict to build the
// layout a load or reshard fills. Pure metadata: no tensor bytes, no I/O beyond reading a
// PLAN.json file.
//
// The built-in plans (every one gives 0-dim tensors Replicate on every mesh dim):
//
//   fsdp     FSDP / FSDP2 (fully_shard) on any mesh: tensor dim 0 split over every mesh dim,
//            [S(0)] on a 1-D mesh, [S(0), S(0)] on a 2-D one (dim 0 split over the whole
//            mesh, coarse pieces on mesh dim 0 split again on mesh dim 1; when dim 0 is a
//            multiple of the mesh size these are the pieces [S(0)] gives on a 1-D mesh of
//            the same size). 1-D tensors too.
//   hsdp     HSDP (fully_shard on a 2-D (replicate, shard) mesh): [R, S(0)]. Needs a 2-D mesh.
//   tp       tensor parallelism by name (see TpRoleOf): column-parallel weights and their
//            biases S(0), row-parallel weights S(1) with Replicate biases, vocabulary
//            embeddings and lm_head S(0), everything else (norms, position embeddings,
//            buffers) Replicate. On a 1-D mesh that is the one placement; on an N-D mesh the
//            last mesh dim is the TP dim and the others are Replicate (data-parallel replicas).
//   fsdp-tp  FSDP2 over TP on a 2-D (dp, tp) mesh, as fully_shard over a module that
//            parallelize_module has made TP produces (torch/distributed/fsdp/_fully_shard/
//            _fsdp_param.py, _init_sharded_dtensor_param): the TP placement stays on the tp
//            mesh dim and FSDP shards dim 0 of the TP-local tensor on the dp dim. When the
//            TP placement also shards dim 0, FSDP's piece is a _StridedShard(0, tp size)
//            ([_S(0, T), S(0)]: rank (d, t) holds the d-th dp chunk of the t-th tp chunk);
//            otherwise it is a plain S(0) ([S(0), S(1)] for row-parallel weights, [S(0), R]
//            for replicated tensors). With a tp dim of size 1 the split factor is 1 and
//            PyTorch, like sdrt, writes S(0).
//
// A PLAN.json file lists rules, first match wins:
//
//   {
//     "rules": [
//       {"pattern": "\\.(q|k|v)_proj\\.weight$", "placements": "[R, S(0)]"},
//       {"pattern": "norm", "placements": ["R", "R"]}
//     ],
//     "default": "[S(0), R]"
//   }
//
// "pattern" is an RE2 regular expression searched in the tensor name (RE2::PartialMatch: a
// match anywhere; anchor with ^ and $), as std::regex_search did before. RE2 matches in
// time linear in the name and without recursion, so no pattern can hang or overflow the
// stack; it has no backreferences or lookaround, and a pattern RE2 cannot compile is
// InvalidArgument naming the rule, the pattern and RE2's error. "rules" may also be an object
// mapping patterns to placements, taken in file order. "placements" is PyTorch's printing ("[R,
// S(0)]",
// "_S(0, 2)", brackets optional) or an array of single placements, one per mesh dim.
// "default" (optional, Replicate on every mesh dim when absent) applies to names no rule
// matches. "mesh_ndim" (optional) states the mesh rank the file is written for; "comment"
// is ignored; any other field is an error. Partial placements are refused (a checkpoint
// holds values, not pending reductions). A 0-dim tensor is Replicate on every mesh dim
// whatever the rules say.
#ifndef SDRT_CORE_CHECKPOINT_SHARDING_PLAN_H_
#define SDRT_CORE_CHECKPOINT_SHARDING_PLAN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt SDRT_API {

// How the built-in tensor-parallel plan treats a tensor, from its name.
enum class TpRole : uint8_t {
  kReplicate,     // norms, position embeddings, buffers, anything unrecognised
  kColumn,        // [out, in] weight split on out: q/k/v, gate/up, BERT query/key/value and
                  // intermediate.dense; weight S(0), bias S(0)
  kRow,           // [out, in] weight split on in: o_proj, down_proj, BERT
                  // attention.output.dense and output.dense; weight S(1), bias R
  kConv1DColumn,  // GPT-2 Conv1D [in, out] column-parallel (c_attn, c_fc): weight S(1),
                  // bias S(0)
  kConv1DRow,     // GPT-2 Conv1D [in, out] row-parallel (c_proj): weight S(0), bias R
  kVocab,         // embed_tokens, word_embeddings, wte, lm_head: [vocab, hidden] S(0)
};

// "replicate", "column", "row", "conv1d-column", "conv1d-row", "vocab".
absl::string_view TpRoleName(TpRole role);

// The role of `name` under the built-in tp plan. Llama-style names
// (model.layers.N.self_attn.q_proj.weight, mlp.gate_proj / up_proj / down_proj, o_proj,
// embed_tokens, lm_head; DeepSeek's q_b_proj and kv_b_proj are column-parallel; an FP8
// weight's block scales, "...q_proj.weight_scale_inv", take its weight's role: a 2-D grid
// of 128 x 128 blocks cut as the weight is), BERT-style
// (encoder.layer.N.attention.self.query.weight, attention.output.dense, intermediate.dense,
// output.dense, embeddings.word_embeddings), Megatron-Core's (linear_qkv, linear_fc1 column;
// linear_proj, linear_fc2 row; output_layer vocabulary) and
// GPT-2-style (h.N.attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj, wte). Matching is on
// the trailing components, so any prefix ("model.", "bert.", "transformer.") works. GPT-2's
// Conv1D stores weights as [in, out], the transpose of nn.Linear, so its column-parallel
// weights are split on dim 1 and its row-parallel ones on dim 0.
TpRole TpRoleOf(absl::string_view name);

// The tp placement of a tensor of rank `ndim` with `role` on the TP mesh dim: weights
// (ndim >= 2) and biases (ndim 1) as listed at TpRole; Replicate for 0-dim tensors and
// for shard dims the tensor does not have.
Placement TpPlacement(TpRole role, int ndim);

class ShardingPlan {
 public:
  enum class Kind : uint8_t { kFsdp, kHsdp, kTp, kFsdpTp, kCustom };

  // A built-in plan by name: "fsdp", "hsdp", "tp", "fsdp-tp". InvalidArgument naming the
  // unknown name and the choices otherwise.
  static absl::StatusOr<ShardingPlan> Builtin(absl::string_view name);

  // A built-in name, or else the path of a PLAN.json file (FromJsonFile). InvalidArgument
  // for a name that is neither a built-in plan nor an existing file (naming both).
  static absl::StatusOr<ShardingPlan> FromSpec(const std::string& spec);

  // Reads and parses a PLAN.json file (format at the top of this header). NotFound / ...
  // (errno) when it cannot be read; InvalidArgument naming the file, the rule (by index
  // and pattern) and what is wrong: not JSON, a missing or mistyped field, a bad regex, an
  // unparsable or Partial placement, rules with different numbers of placements, or a
  // "mesh_ndim" that disagrees with them.
  static absl::StatusOr<ShardingPlan> FromJsonFile(const std::string& path);
  // Parses PLAN.json text; `source` names it in messages.
  static absl::StatusOr<ShardingPlan> FromJson(absl::string_view text, absl::string_view source);

  Kind kind() const { return kind_; }
  // "fsdp", "hsdp", "tp", "fsdp-tp", or the PLAN.json path (`source`).
  const std::string& name() const { return name_; }
  // A custom plan's content: the XXH64 of its JSON as parsed, without comments, written
  // compactly (keys in their order; whitespace does not count), so that two files of the
  // same rules compare equal and an edited file does not. 0 for a built-in plan.
  uint64_t rules_xxh64() const { return rules_xxh64_; }

  // OK when the plan can place tensors on `mesh`: hsdp and fsdp-tp need a 2-D mesh, a
  // custom plan a mesh of its rules' length; InvalidArgument naming the plan, the rule
  // and the mesh otherwise.
  absl::Status CheckMesh(const DeviceMesh& mesh) const;

  // The placements, one per mesh dim, of the tensor `name` of `shape` on `mesh`.
  // InvalidArgument (naming the plan, the tensor, the rule that matched and the mesh) for
  // the errors of CheckMesh and for a rule whose placements shard a dim the tensor does
  // not have.
  absl::StatusOr<std::vector<Placement>> PlacementsFor(absl::string_view name, IntSpan shape,
                                                       const DeviceMesh& mesh) const;

  // Rank `rank`'s layout of `tensors` (a model definition's or a checkpoint's tensor list:
  // CheckpointSource::TensorSpecs, ShardedCheckpointIndex::TensorSpecs) under this plan on
  // `mesh`, before any byte is loaded: a flat state dict holding, for each tensor in order
  // under its name, a DTensor with the plan's placements (PlacementsFor), the tensor's
  // global shape and contiguous global stride, whose local is a meta tensor (no memory) of
  // the tensor's dtype and of the local shape `rank` holds (ComputeLocalShape: uneven and
  // empty pieces as torch.chunk cuts them, 0-dim tensors whole). This is the destination
  // LoadStateDict (of every source, sdrt sharded folders included) and ReshardStateDict fill (each
  // meta local becomes a fresh tensor of that shape). `rank` is a global rank, as in the mesh. A
  // rank not in the mesh holds nothing of the layout: PyTorch gives it a (0,) local
  // (compute_local_shape_and_global_offset), which no DTensor here can hold (its local has
  // the global rank), so it gets an empty map, what those verbs take from a rank that
  // receives nothing. Mirrors no single PyTorch function: it is what a model built on the
  // meta device and parallelized by the plan holds on that rank.
  // Errors: InvalidArgument for a null mesh, a name given twice (naming it), a negative
  // dim, a sub-byte tensor cut inside a byte (CheckShardingCutsWholeBytes, naming it); the
  // errors of PlacementsFor (naming the plan, the tensor and the mesh).
  absl::StatusOr<Map> MetaStateDict(const std::vector<SafetensorsTensorSpec>& tensors,
                                    std::shared_ptr<const DeviceMesh> mesh, int64_t rank) const;

 private:
  struct Rule;

  ShardingPlan() = default;

  Kind kind_ = Kind::kFsdp;
  std::string name_;
  // Custom plans: the rules in order, then the default (nullptr: Replicate). Shared so
  // that plans copy cheaply; immutable.
  std::shared_ptr<const std::vector<Rule>> rules_;
  std::shared_ptr<const std::vector<Placement>> default_;
  int mesh_ndim_ = 0;  // custom plans: the length of every placement list
  uint64_t rules_xxh64_ = 0;
};

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_SHARDING_PLAN_H_
