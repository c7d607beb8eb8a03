// The regroup row of `sdrt bench` (bench_ops.h):
//
//   sync_regroup  timed: a trainer holding each layer's attention and MLP weights fused as
//                 Megatron-core does (linear_qkv: per kv head's query group [its query
//                 heads; its key head; its value head]; linear_fc1: [gate; up]), Shard(0)
//                 over the world, bound to the same tp engine buffers as sync_mapped's
//                 through regroup rules; baseline: sync_mapped's timed sync (the same
//                 engine bytes from Hugging Face's unfused tensors).
//
// The Llama workload only. After the timed runs every byte the engine holds is compared
// with the layout built from the full tensors by plain slicing, #wrong summed over ranks.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tools/sdrt/internal/bench_mapped.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// Rows [at, at + n) of tensor `part` (of Stack's list).
struct Rows {
  size_t part;
  int64_t at, n;
};

// The rows `order` names of `parts` (tensors of one width and dtype), one after another.
absl::StatusOr<Tensor> Stack(const std::vector<const Tensor*>& parts,
                             const std::vector<Rows>& order) {
  int64_t rows = 0;
  for (const Rows& r : order) rows += r.n;
  SDRT_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty({rows, parts[0]->size(1)}, parts[0]->dtype()));
  int64_t at = 0;
  for (const Rows& r : order) {
    SDRT_ASSIGN_OR_RETURN(Tensor from, parts[r.part]->Narrow(0, r.at, r.n));
    SDRT_ASSIGN_OR_RETURN(Tensor into, out.Narrow(0, at, r.n));
    SDRT_RETURN_IF_ERROR(into.CopyFrom(from));
    at += r.n;
  }
  return out;
}

}  // namespace

absl::StatusOr<BenchRow> BenchRunner::SyncRegroup() {
  BenchRow row = NewRow("sync_regroup", -1);
  SDRT_ASSIGN_OR_RETURN(const MappedSync m, PrepareMappedSync("sync_regroup"));
  // The Megatron trainer: every layer's q, k, v and gate, up fused as Megatron holds them,
  // Shard(0) over the world; every other tensor the workload's own piece.
  Map trainer;
  int64_t q_rows = 0, kv_rows = 0, inter = 0;
  for (const SafetensorsTensorSpec& s : m.specs) {
    const auto ends = [&](absl::string_view tail) { return absl::EndsWith(s.name, tail); };
    const auto stem = [&](absl::string_view tail) {
      return s.name.substr(0, s.name.size() - tail.size());
    };
    if (ends("self_attn.k_proj.weight") || ends("self_attn.v_proj.weight") ||
        ends("mlp.up_proj.weight")) {
      continue;  // fused with q_proj / gate_proj below
    }
    if (ends("self_attn.q_proj.weight")) {
      const std::string layer = stem("q_proj.weight");
      const Tensor& q = m.Full(workload_, s.name);
      const Tensor& k = m.Full(workload_, layer + "k_proj.weight");
      const Tensor& v = m.Full(workload_, layer + "v_proj.weight");
      q_rows = q.size(0);
      kv_rows = k.size(0);
      const int64_t groups = kv_rows / kLlamaHeadSize, per_group = q_rows / groups;
      std::vector<Rows> order;
      for (int64_t g = 0; g < groups; ++g) {
        order.push_back({0, g * per_group, per_group});
        order.push_back({1, g * kLlamaHeadSize, kLlamaHeadSize});
        order.push_back({2, g * kLlamaHeadSize, kLlamaHeadSize});
      }
      SDRT_ASSIGN_OR_RETURN(const Tensor qkv, Stack({&q, &k, &v}, order));
      SDRT_ASSIGN_OR_RETURN(DTensor piece,
                            DistributeTensor(qkv, mesh_, {Placement::Shard(0)}, rank_));
      trainer.Set(layer + "linear_qkv.weight", Value(std::move(piece)));
      continue;
    }
    if (ends("mlp.gate_proj.weight")) {
      const std::string mlp = stem("gate_proj.weight");
      const Tensor& gate = m.Full(workload_, s.name);
      const Tensor& up = m.Full(workload_, mlp + "up_proj.weight");
      inter = gate.size(0);
      SDRT_ASSIGN_OR_RETURN(const Tensor fc1, Stack({&gate, &up}, {{0, 0, inter}, {1, 0, inter}}));
      SDRT_ASSIGN_OR_RETURN(DTensor piece,
                            DistributeTensor(fc1, mesh_, {Placement::Shard(0)}, rank_));
      trainer.Set(mlp + "linear_fc1.weight", Value(std::move(piece)));
      continue;
    }
    trainer.Set(s.name, *sharded_.Find(s.name));
  }
  std::vector<WeightMapRule> rules(2);
  rules[0].kind = rules[1].kind = WeightMapRule::Kind::kRegroup;
  rules[0].from = {R"((.*)self_attn\.linear_qkv\.weight)"};
  rules[0].to = {"{1}self_attn.qkv_proj.weight"};
  rules[0].head_size = kLlamaHeadSize;
  rules[0].sizes = {q_rows, kv_rows, kv_rows};
  rules[1].from = {R"((.*)mlp\.linear_fc1\.weight)"};
  rules[1].to = {"{1}mlp.gate_up_proj.weight"};
  rules[1].groups = 1;
  rules[1].sizes = {inter, inter};
  for (const WeightMapRule& r : m.map.rules()) {
    if (r.kind == WeightMapRule::Kind::kPad) rules.push_back(r);  // the padded vocabularies
  }
  SDRT_ASSIGN_OR_RETURN(const WeightMap regroup, WeightMap::FromRules(std::move(rules)));

  absl::StatusOr<Map> from_hf = EngineBuffers(m.mapped_specs, *m.tp, mesh_, rank_);
  absl::StatusOr<Map> from_megatron = EngineBuffers(m.mapped_specs, *m.tp, mesh_, rank_);
  absl::Status ready = from_hf.status();
  ready.Update(from_megatron.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  SDRT_ASSIGN_OR_RETURN(BoundReshard fused, BindSync(*from_hf, &m.map));
  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  options.weight_map = regroup;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, *from_megatron, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, plan.status()));
  absl::StatusOr<BoundReshard> regrouped = BindReshard(*plan, trainer, *from_megatron);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, regrouped.status()));

  SDRT_RETURN_IF_ERROR(TimeSyncs(*regrouped, fused, row, nullptr));
  SDRT_ASSIGN_OR_RETURN(const int64_t wrong, WrongInEngine(m, *from_megatron));
  row.wrong = SumOverRanks(wrong);
  return row;
}

}  // namespace sdrt::cli
