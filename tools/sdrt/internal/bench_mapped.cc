// The mapped rows of `sdrt bench` (bench_ops.h): trainer -> engine weight syncs through a
// weight map, each against a baseline in the same run. The trainer holds every tensor
// Shard(0) over the world (fsdp); the engine is the tp plan on the same ranks, with its own
// buffers (one allocation per rank) bound once:
//
//   sync_mapped  timed: the built-in map vllm-llama (fused qkv_proj and gate_up_proj, the
//                vocabulary padded to a multiple of 64), BoundReshard::Execute; baseline:
//                the unmapped tensors in the tp layout (q, k, v, gate, up apart), bound the
//                same way: the bytes the engine would get without the map.
//   sync_fp8     timed: the same map into float8_e4m3fn linear weights, each with one
//                float32 scale ("<weight>_scale"; the workload's 16-wide heads put tp
//                pieces inside 128 x 128 blocks, so per tensor); baseline: sync_mapped's
//                timed sync (bfloat16). The wire bytes of both are printed.
//
// The Llama workload only (its names; head size 16). After the timed runs every byte the
// engine holds is compared with the layout built from the full tensors by plain slicing
// (each component's rank piece stacked, the pad zero; for FP8 quantized by PyTorch's recipe,
// tensor/internal/fp8_scale.h, with the amax of the whole tensor), #wrong summed over ranks.
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_mapped.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
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

namespace {

// Clears the highest exponent bit of every bfloat16 of `t` (a contiguous CPU tensor; other
// dtypes are left): the values stay noise, but finite and under 2 in magnitude.
void Finite(const Tensor& t) {
  if (t.dtype() != DType::kBFloat16 || !t.is_contiguous() || !t.device().is_cpu()) return;
  uint16_t* const bits = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) bits[i] &= 0xBFFF;
}

// A linear layer's weight: what sync_fp8 quantizes.
bool Linear(const SafetensorsTensorSpec& s) {
  return s.shape.size() == 2 && absl::EndsWith(s.name, "_proj.weight");
}

}  // namespace

// The sources a fused engine tensor is made of (none for any other).
std::vector<std::string> ComponentsOf(const std::string& name) {
  for (const auto& [fused, parts] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"qkv_proj.weight", {"q_proj.weight", "k_proj.weight", "v_proj.weight"}},
           {"gate_up_proj.weight", {"gate_proj.weight", "up_proj.weight"}}}) {
    if (absl::EndsWith(name, fused)) {
      const std::string p = name.substr(0, name.size() - fused.size());
      std::vector<std::string> out;
      for (const std::string& c : parts) out.push_back(p + c);
      return out;
    }
  }
  return {};
}

// Bytes of `got` that differ from `want`'s (all of them when they cannot be compared).
int64_t DifferingBytes(const Tensor& got, const Tensor& want) {
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
}

absl::StatusOr<BenchRunner::MappedSync> BenchRunner::PrepareMappedSync(const std::string& op) {
  MappedSync m;
  bool llama = false;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    m.specs.push_back({workload_.names[i], workload_.full[i].dtype(), workload_.full[i].shape()});
    m.index[workload_.names[i]] = i;
    llama = llama || absl::EndsWith(workload_.names[i], "self_attn.q_proj.weight");
  }
  if (!llama || workload_.name != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat(op, " needs --workload llama (its tensor names and head size 16)"));
  }
  SDRT_ASSIGN_OR_RETURN(m.map, WeightMap::Builtin("vllm-llama", kLlamaHeadSize));
  SDRT_ASSIGN_OR_RETURN(m.tp, ShardingPlan::Builtin("tp"));
  m.parts = mesh_->num_ranks();
  absl::StatusOr<std::vector<SafetensorsTensorSpec>> mapped = m.map.DestinationTensors(
      m.specs, [&](absl::string_view, const IntVector&, int) -> absl::StatusOr<int64_t> {
        return m.parts;
      });
  absl::Status ready = MakeSharded();
  ready.Update(mapped.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  m.mapped_specs = *std::move(mapped);
  return m;
}

// A bound sync of the trainer's pieces into `engine` through `map` (none: unmapped).
absl::StatusOr<BoundReshard> BenchRunner::BindSync(Map& engine, const WeightMap* map) {
  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  if (map != nullptr) options.weight_map = *map;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(sharded_, engine, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, plan.status()));
  absl::StatusOr<BoundReshard> bound = BindReshard(*plan, sharded_, engine);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, bound.status()));
  return bound;
}

absl::Status BenchRunner::TimeSyncs(BoundReshard& timed, BoundReshard& baseline, BenchRow& row,
                                    TransferStats* baseline_stats) {
  TransferStats stats;
  absl::Status flat_status;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] { return timed.Execute(&stats); };
  calls.flat = [&] {
    const absl::Status s = baseline.Execute(baseline_stats);
    EndJobIfTimedOut("bench", s);  // a rank is missing: nothing after this can be agreed
    flat_status.Update(s);
  };
  calls.raw_baselines = false;
  calls.fresh = [&] { return baseline.Execute(); };
  calls.release = [] {};
  SDRT_RETURN_IF_ERROR(MeasureRow(world_, calls, settings_.warmup, settings_.iterations,
                                  &row.times));
  SDRT_RETURN_IF_ERROR(flat_status);
  row.stats = stats;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> BenchRunner::WrongInEngine(const MappedSync& m, const Map& engine) {
  int64_t wrong = 0;
  for (const SafetensorsTensorSpec& s : m.mapped_specs) {
    const DTensor& got = engine.Find(s.name)->as_dtensor();
    SDRT_ASSIGN_OR_RETURN(const Tensor want,
                          m.Expected(workload_, s, got.placements(), mesh_, rank_));
    wrong += DifferingBytes(got.local(), want);
  }
  return wrong;
}

absl::StatusOr<BenchRow> BenchRunner::SyncMapped() {
  BenchRow row = NewRow("sync_mapped", -1);
  SDRT_ASSIGN_OR_RETURN(const MappedSync m, PrepareMappedSync("sync_mapped"));
  absl::StatusOr<Map> plain = EngineBuffers(m.specs, *m.tp, mesh_, rank_);
  absl::StatusOr<Map> fused = EngineBuffers(m.mapped_specs, *m.tp, mesh_, rank_);
  absl::Status ready = plain.status();
  ready.Update(fused.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  SDRT_ASSIGN_OR_RETURN(BoundReshard unmapped, BindSync(*plain, nullptr));
  SDRT_ASSIGN_OR_RETURN(BoundReshard mapped, BindSync(*fused, &m.map));

  SDRT_RETURN_IF_ERROR(TimeSyncs(mapped, unmapped, row, nullptr));
  // The checks: every engine local against slices of the full tensors.
  SDRT_ASSIGN_OR_RETURN(const int64_t wrong, WrongInEngine(m, *fused));
  int64_t flat_wrong = 0;
  for (const SafetensorsTensorSpec& s : m.specs) {
    const DTensor& got = plain->Find(s.name)->as_dtensor();
    SDRT_ASSIGN_OR_RETURN(const DTensor d, DistributeTensor(m.Full(workload_, s.name), mesh_,
                                                            got.placements(), rank_));
    flat_wrong += DifferingBytes(got.local(), d.local());
  }
  row.wrong = SumOverRanks(wrong);
  row.flat_wrong = SumOverRanks(flat_wrong);
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::SyncFp8() {
  BenchRow row = NewRow("sync_fp8", -1);
  SDRT_ASSIGN_OR_RETURN(const MappedSync m, PrepareMappedSync("sync_fp8"));
  // The workload's bytes are noise, NaN and infinities included (every code and scale
  // NaN, as PyTorch would make them): from here on (the last row) every bfloat16 keeps
  // its bits but the exponent's highest, so |x| < 2, finite, for the full tensors and the
  // trainer's pieces alike.
  for (const Tensor& t : workload_.full) Finite(t);
  SDRT_ASSIGN_OR_RETURN(const internal::Leaves pieces, internal::CollectLeaves(sharded_));
  for (const internal::Leaf& leaf : pieces) {
    if (leaf.value->kind() != ValueKind::kDTensor) continue;
    Finite(leaf.value->as_dtensor().local());
  }
  std::vector<SafetensorsTensorSpec> fp8_specs;
  for (SafetensorsTensorSpec s : m.mapped_specs) {
    const bool linear = Linear(s);
    if (linear) s.dtype = DType::kFloat8E4M3FN;
    fp8_specs.push_back(s);
    if (linear) fp8_specs.push_back({s.name + "_scale", DType::kFloat32, {1}});
  }
  absl::StatusOr<Map> bf16 = EngineBuffers(m.mapped_specs, *m.tp, mesh_, rank_);
  absl::StatusOr<Map> fp8 = EngineBuffers(fp8_specs, *m.tp, mesh_, rank_);
  absl::Status ready = bf16.status();
  ready.Update(fp8.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  SDRT_ASSIGN_OR_RETURN(BoundReshard wide, BindSync(*bf16, &m.map));
  SDRT_ASSIGN_OR_RETURN(BoundReshard narrow, BindSync(*fp8, &m.map));

  TransferStats wide_stats;
  SDRT_RETURN_IF_ERROR(TimeSyncs(narrow, wide, row, &wide_stats));
  row.wire_bytes = row.stats.wire_bytes;
  row.flat_wire_bytes = wide_stats.wire_bytes;

  // The checks: the codes of the sliced layout with the scale of the whole tensor (the amax
  // of every component), and the scale itself.
  int64_t wrong = 0;
  for (const SafetensorsTensorSpec& s : m.mapped_specs) {
    const DTensor& got = fp8->Find(s.name)->as_dtensor();
    SDRT_ASSIGN_OR_RETURN(Tensor want, m.Expected(workload_, s, got.placements(), mesh_, rank_));
    SDRT_ASSIGN_OR_RETURN(want, want.Contiguous());
    if (Linear(s)) {
      std::vector<std::string> components = ComponentsOf(s.name);
      if (components.empty()) components = {s.name};
      float amax = 0.0f;
      for (const std::string& c : components) {
        const Tensor& full = m.Full(workload_, c);
        float part = 0.0f;
        internal::AbsMax(full.data_ptr(), full.dtype(), full.numel(), &part);
        amax = std::max(amax, part);
      }
      const float scale = internal::TileScale(amax, DType::kFloat8E4M3FN, false);
      SDRT_ASSIGN_OR_RETURN(Tensor codes, Tensor::Empty(want.shape(), DType::kFloat8E4M3FN));
      internal::QuantizeFloats(want.data_ptr(), want.dtype(), codes.data_ptr(),
                               DType::kFloat8E4M3FN, scale, want.numel());
      want = codes;
      SDRT_ASSIGN_OR_RETURN(Tensor stored, Tensor::Empty({1}, DType::kFloat32));
      *stored.data<float>() = scale;
      wrong += DifferingBytes(fp8->Find(s.name + "_scale")->as_dtensor().local(), stored);
    }
    wrong += DifferingBytes(got.local(), want);
  }
  row.wrong = SumOverRanks(wrong);
  return row;
}

}  // namespace sdrt::cli
