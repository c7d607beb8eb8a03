// The mapped row of `sdrt bench` (bench_ops.h): `sync_mapped`, a trainer -> engine weight
// sync through a weight map, against the same sync without one, in the same run. The
// trainer holds every tensor Shard(0) over the world (fsdp); the engine is the tp plan on
// the same ranks, with its own buffers (one allocation per rank) bound once:
//
//   timed:    the built-in map vllm-llama (fused qkv_proj and gate_up_proj, the vocabulary
//             padded to a multiple of 64), BoundReshard::Execute;
//   baseline: the unmapped tensors in the tp layout (q, k, v, gate, up apart), bound the
//             same way: the bytes the engine would get without the map.
//
// The Llama workload only (its names; head size 16). After the timed runs every byte the
// engine holds is compared with the layout built from the full tensors by plain slicing
// (each component's rank piece stacked, the pad zero), #wrong summed over ranks.
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// The Llama workload's attention head size (hidden 512 = 32 heads x 16).
constexpr int64_t kLlamaHeadSize = 16;

// Zeroed DTensors of `specs` under the tp plan on `mesh`, views of one allocation.
absl::StatusOr<Map> EngineBuffers(const std::vector<SafetensorsTensorSpec>& specs,
                                  const ShardingPlan& tp, std::shared_ptr<const DeviceMesh> mesh,
                                  int rank) {
  std::vector<std::vector<Placement>> placements;
  std::vector<IntVector> shapes;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const SafetensorsTensorSpec& s : specs) {
    SDRT_ASSIGN_OR_RETURN(placements.emplace_back(), tp.PlacementsFor(s.name, s.shape, *mesh));
    SDRT_ASSIGN_OR_RETURN(shapes.emplace_back(),
                          ComputeLocalShape(s.shape, *mesh, placements.back(), rank));
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(shapes.back()));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(s.dtype, numel));
    offsets.push_back(total);
    total += (bytes + 63) / 64 * 64;
  }
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> arena, Storage::AllocateCpu(total));
  if (total > 0) std::memset(arena->data(), 0, static_cast<size_t>(total));
  Map out;
  for (size_t i = 0; i < specs.size(); ++i) {
    SDRT_ASSIGN_OR_RETURN(Tensor local,
                          Tensor::AtByteOffset(arena, offsets[i], specs[i].dtype, shapes[i]));
    SDRT_ASSIGN_OR_RETURN(DTensor d,
                          DTensor::Make(std::move(local), mesh, placements[i], specs[i].shape));
    out.Set(specs[i].name, Value(std::move(d)));
  }
  return out;
}

// Rows [r * n / parts, (r + 1) * n / parts) of `full` (n rows, divisible by parts).
absl::StatusOr<Tensor> Part(const Tensor& full, int64_t parts, int64_t r) {
  const int64_t n = full.size(0) / parts;
  return full.Narrow(0, r * n, n);
}

}  // namespace

absl::StatusOr<BenchRow> BenchRunner::SyncMapped() {
  BenchRow row = NewRow("sync_mapped", -1);
  std::vector<SafetensorsTensorSpec> specs;
  bool llama = false;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    specs.push_back({workload_.names[i], workload_.full[i].dtype(), workload_.full[i].shape()});
    llama = llama || absl::EndsWith(workload_.names[i], "self_attn.q_proj.weight");
  }
  if (!llama || workload_.name != "llama") {
    return absl::InvalidArgumentError(
        "sync_mapped needs --workload llama (its tensor names and head size 16)");
  }
  SDRT_ASSIGN_OR_RETURN(const WeightMap map, WeightMap::Builtin("vllm-llama", kLlamaHeadSize));
  SDRT_ASSIGN_OR_RETURN(const ShardingPlan tp, ShardingPlan::Builtin("tp"));
  const int64_t parts = mesh_->num_ranks();
  absl::StatusOr<std::vector<SafetensorsTensorSpec>> mapped_specs = map.DestinationTensors(
      specs, [&](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> {
        return parts;
      });
  absl::Status ready = MakeSharded();
  ready.Update(mapped_specs.status());
  absl::StatusOr<Map> plain = EngineBuffers(specs, tp, mesh_, rank_);
  absl::StatusOr<Map> fused = mapped_specs.ok()
                                  ? EngineBuffers(*mapped_specs, tp, mesh_, rank_)
                                  : absl::StatusOr<Map>(mapped_specs.status());
  ready.Update(plain.status());
  ready.Update(fused.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));

  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  absl::StatusOr<ReshardPlan> unmapped_plan = PlanReshard(sharded_, *plain, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, unmapped_plan.status()));
  options.weight_map = map;
  absl::StatusOr<ReshardPlan> mapped_plan = PlanReshard(sharded_, *fused, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, mapped_plan.status()));
  absl::StatusOr<BoundReshard> unmapped = BindReshard(*unmapped_plan, sharded_, *plain);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, unmapped.status()));
  absl::StatusOr<BoundReshard> mapped = BindReshard(*mapped_plan, sharded_, *fused);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, mapped.status()));

  TransferStats stats;
  absl::Status flat_status;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] { return mapped->Execute(&stats); };
  calls.flat = [&] { flat_status.Update(unmapped->Execute()); };
  calls.fresh = [&] { return unmapped->Execute(); };
  calls.release = [] {};
  SDRT_RETURN_IF_ERROR(MeasureRow(world_, calls, settings_.warmup, settings_.iterations,
                                  &row.times));
  SDRT_RETURN_IF_ERROR(flat_status);
  row.stats.collectives = stats.collectives;
  row.stats.exchanges = stats.exchanges;
  row.stats.received_bytes = stats.received_bytes;

  // The checks: every engine local against slices of the full tensors.
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < workload_.names.size(); ++i) index[workload_.names[i]] = i;
  const auto full = [&](const std::string& name) { return workload_.full[index.at(name)]; };
  const auto wrong_bytes = [](const Tensor& got, const Tensor& want) -> int64_t {
    absl::StatusOr<Tensor> dense = got.Contiguous();
    absl::StatusOr<Tensor> expected = want.Contiguous();
    if (!dense.ok() || !expected.ok() || dense->nbytes() != expected->nbytes()) {
      return want.nbytes();
    }
    const auto* a = static_cast<const uint8_t*>(dense->data_ptr());
    const auto* b = static_cast<const uint8_t*>(expected->data_ptr());
    int64_t wrong = 0;
    for (int64_t j = 0; j < dense->nbytes(); ++j) wrong += a[j] != b[j] ? 1 : 0;
    return wrong;
  };
  int64_t wrong = 0;
  for (const SafetensorsTensorSpec& s : *mapped_specs) {
    const Tensor& got = fused->Find(s.name)->as_dtensor().local();
    std::vector<std::string> components;
    if (absl::EndsWith(s.name, "qkv_proj.weight")) {
      const std::string p = s.name.substr(0, s.name.size() - std::string("qkv_proj.weight").size());
      components = {p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"};
    } else if (absl::EndsWith(s.name, "gate_up_proj.weight")) {
      const std::string p =
          s.name.substr(0, s.name.size() - std::string("gate_up_proj.weight").size());
      components = {p + "gate_proj.weight", p + "up_proj.weight"};
    }
    Tensor want;
    if (!components.empty()) {
      // [component 0's rank piece; component 1's; ...] (kv heads >= ranks: no replication).
      std::vector<Tensor> pieces;
      int64_t rows = 0;
      for (const std::string& c : components) {
        SDRT_ASSIGN_OR_RETURN(pieces.emplace_back(), Part(full(c), parts, rank_));
        rows += pieces.back().size(0);
      }
      SDRT_ASSIGN_OR_RETURN(want, Tensor::Empty({rows, s.shape[1]}, s.dtype));
      int64_t at = 0;
      for (const Tensor& piece : pieces) {
        SDRT_ASSIGN_OR_RETURN(Tensor into, want.Narrow(0, at, piece.size(0)));
        SDRT_RETURN_IF_ERROR(into.CopyFrom(piece));
        at += piece.size(0);
      }
    } else if (s.shape != full(s.name).shape()) {
      // A padded vocabulary: the full tensor with zero rows after it, then this rank's rows.
      SDRT_ASSIGN_OR_RETURN(Tensor padded, Tensor::Zeros(s.shape, s.dtype));
      SDRT_ASSIGN_OR_RETURN(Tensor head, padded.Narrow(0, 0, full(s.name).size(0)));
      SDRT_RETURN_IF_ERROR(head.CopyFrom(full(s.name)));
      SDRT_ASSIGN_OR_RETURN(want, Part(padded, parts, rank_));
    } else {
      SDRT_ASSIGN_OR_RETURN(const DTensor d,
                            DistributeTensor(full(s.name), mesh_,
                                             fused->Find(s.name)->as_dtensor().placements(),
                                             rank_));
      want = d.local();
    }
    wrong += wrong_bytes(got, want);
  }
  int64_t flat_wrong = 0;
  for (const SafetensorsTensorSpec& s : specs) {
    const DTensor& got = plain->Find(s.name)->as_dtensor();
    SDRT_ASSIGN_OR_RETURN(const DTensor d,
                          DistributeTensor(full(s.name), mesh_, got.placements(), rank_));
    flat_wrong += wrong_bytes(got.local(), d.local());
  }
  row.wrong = SumOverRanks(wrong);
  row.flat_wrong = SumOverRanks(flat_wrong);
  return row;
}

}  // namespace sdrt::cli
