// Flatten / unflatten of a 10,000-leaf nested state dict (docs/PERFORMANCE.md target: flatten +
// unflatten <= 2 ms on one core; PyTorch's _flatten_state_dict + _unflatten_state_dict
// take 11.7 + 13.5 ms on the same shape).
//
// The state dict is deterministic: {"model": {"layers": [100 layers]}}, each layer a map
// of 10 modules ("self_attn_q_proj", ...), each module 8 named leaves (two tensor handles
// to one small float32 tensor per module, an int, a float, None, a string, a bool, an
// int) plus "shape": [rows, cols] (2 leaves): 100 x 10 x 10 = 10,000 leaves, flat keys
// like "model.layers.37.mlp_down_proj.running_mean" (longer than the 15-byte inline
// string buffer, as real FQNs are).
//
// Counters: leaves, ns_per_leaf and "wrong": 1 when unflatten(flatten(sd)) != sd or the
// flat dict lacks a leaf (checked once per case, outside the timed loop).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/state_dict/flatten.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt {
namespace {

constexpr int kLayers = 100;
constexpr int kModules = 10;
constexpr int kLeaves = kLayers * kModules * 10;

const char* const kModuleNames[kModules] = {
    "self_attn_q_proj", "self_attn_k_proj", "self_attn_v_proj", "self_attn_o_proj", "mlp_gate_proj",
    "mlp_up_proj",      "mlp_down_proj",    "input_layernorm",  "post_attn_norm",   "rotary_emb"};

Map MakeStateDict() {
  List layers;
  for (int l = 0; l < kLayers; ++l) {
    Map layer;
    for (int m = 0; m < kModules; ++m) {
      Tensor t = *Tensor::Zeros({4, 4}, DType::kFloat32);
      t.data<float>()[0] = static_cast<float>(l * kModules + m);
      layer.Set(kModuleNames[m], Map{{"weight", t},
                                     {"bias", t},
                                     {"num_batches_tracked", l * 1000 + m},
                                     {"running_mean", 0.5 * l + m},
                                     {"lora_scale", None{}},
                                     {"init_method", "kaiming_uniform"},
                                     {"frozen", (l + m) % 2 == 0},
                                     {"step", l},
                                     {"shape", List{4 * l + 1, m}}});
    }
    layers.items.push_back(std::move(layer));
  }
  return Map{{"model", Map{{"layers", std::move(layers)}}}};
}

int64_t Wrong(const Map& sd) {
  absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
  if (!flat.ok() || flat->flat.size() != kLeaves ||
      !flat->flat.contains("model.layers.37.mlp_down_proj.running_mean")) {
    return 1;
  }
  absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
  return back.ok() && Value(*back) == Value(sd) ? 0 : 1;
}

void Report(benchmark::State& state, int64_t wrong) {
  state.counters["leaves"] = kLeaves;
  state.counters["ns_per_leaf"] = benchmark::Counter(
      static_cast<double>(kLeaves) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["wrong"] = static_cast<double>(wrong);
}

void BM_Flatten(benchmark::State& state) {
  const Map sd = MakeStateDict();
  for (auto _ : state) {
    absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
    benchmark::DoNotOptimize(flat);
  }
  Report(state, Wrong(sd));
}

void BM_Unflatten(benchmark::State& state) {
  const Map sd = MakeStateDict();
  const FlatStateDict flat = *FlattenStateDict(sd);
  for (auto _ : state) {
    absl::StatusOr<Map> back = UnflattenStateDict(flat.flat, flat.mapping);
    benchmark::DoNotOptimize(back);
  }
  Report(state, Wrong(sd));
}

void BM_FlattenUnflatten(benchmark::State& state) {
  const Map sd = MakeStateDict();
  for (auto _ : state) {
    absl::StatusOr<FlatStateDict> flat = FlattenStateDict(sd);
    absl::StatusOr<Map> back = UnflattenStateDict(flat->flat, flat->mapping);
    benchmark::DoNotOptimize(back);
  }
  Report(state, Wrong(sd));
}

// Baseline in the same run: a deep copy of the same tree (Value copy: every map, list and
// string rebuilt, tensor handles shared), the work of building one 10,000-leaf tree.
void BM_CopyTree(benchmark::State& state) {
  const Value sd = MakeStateDict();
  for (auto _ : state) {
    Value copy = sd;
    benchmark::DoNotOptimize(copy);
  }
  Report(state, 0);
}

BENCHMARK(BM_CopyTree)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Flatten)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Unflatten)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FlattenUnflatten)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace sdrt

BENCHMARK_MAIN();
