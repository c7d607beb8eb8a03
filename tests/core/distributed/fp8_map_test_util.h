// Helpers of the FP8 weight-map tests (fp8_map_mpi_test.cc, fp8_regroup_mpi_test.cc): the
// golden (tests/data/fp8_map/expected.json), the golden script's source formula, FNV-1a of a
// tensor's bytes, scales as raw integers, the engine's FP8 buffers of a case and the check of
// them (once bound too), its bfloat16 buffers of a dequant case and their check, an fsdp
// trainer's sources. The test's main sets g_world. Test code only.
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_FP8_MAP_TEST_UTIL_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_FP8_MAP_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt::testing_fp8_map {

using json = nlohmann::json;

inline MpiCommunicator* g_world = nullptr;
inline const char* const kOrder[] = {"q_proj", "k_proj", "v_proj", "gate_proj",
                              "up_proj", "o_proj", "down_proj"};
inline const char* const kDestinations[] = {"qkv_proj", "gate_up_proj", "o_proj", "down_proj"};

inline const json& Golden() {
  static const json* golden = [] {
    absl::StatusOr<json> j = testing_golden::ReadGoldenJson("fp8_map/expected.json");
    return new json(j.ok() ? *std::move(j) : json());
  }();
  return *golden;
}

inline std::string HfName(const std::string& key) {
  const bool attn = key == "q_proj" || key == "k_proj" || key == "v_proj" || key == "o_proj" ||
                    key == "qkv_proj";
  return absl::StrCat("model.layers.0.", attn ? "self_attn." : "mlp.", key, ".weight");
}

// The golden script's source formula (make_fp8_map_golden.py), element by element.
inline Tensor Source(int t, int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint64_t u = (static_cast<uint64_t>(i) * 2654435761ull + t * 40503ull + 12345ull) &
                       0xffffffffull;
    const int64_t m = static_cast<int64_t>(u >> 8) - (int64_t{1} << 23);
    const int64_t r = i / cols, c = i % cols;
    const int e = static_cast<int>(((r / 128) * 3 + (c / 128) * 5 + t) % 9) - 4;
    x[static_cast<size_t>(i)] = std::ldexp(static_cast<float>(m), e - 23);
    if (t == 4 && r < 128 && c < 128) x[static_cast<size_t>(i)] = 0.0f;
  }
  Tensor out = *Tensor::Empty({rows, cols}, DType::kBFloat16);
  EXPECT_TRUE(internal::ConvertFloats(x.data(), DType::kFloat32, out.data_ptr(),
                                      DType::kBFloat16, rows * cols));
  return out;
}

inline std::string Fnv(const Tensor& t) {
  const Tensor dense = *t.Contiguous();
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* p = static_cast<const uint8_t*>(dense.data_ptr());
  for (int64_t i = 0; i < dense.nbytes(); ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return absl::StrFormat("%016x", h);
}

inline std::vector<int64_t> Raw(const Tensor& scales) {
  const Tensor dense = *scales.Contiguous();
  std::vector<int64_t> out;
  for (int64_t i = 0; i < dense.numel(); ++i) {
    out.push_back(dense.dtype() == DType::kFloat32 ? dense.data<int32_t>()[i]
                                                   : dense.data<uint8_t>()[i]);
  }
  return out;
}

inline std::map<std::string, Tensor> Sources() {
  std::map<std::string, Tensor> out;
  for (int t = 0; t < 7; ++t) {
    const json& shape = Golden()["shapes"][kOrder[t]];
    out[kOrder[t]] = Source(t, shape[0].get<int64_t>(), shape[1].get<int64_t>());
  }
  return out;
}

inline constexpr int64_t kMegatronHead = 128;

// Rows [row, row + count) of `from` appended to `to` at `at` (rows of the same width).
inline void CopyRows(const Tensor& from, int64_t row, int64_t count, Tensor& to, int64_t& at) {
  const int64_t width = from.nbytes() / from.shape()[0];
  std::memcpy(static_cast<char*>(to.data_ptr()) + at * width,
              static_cast<const char*>(from.data_ptr()) + row * width,
              static_cast<size_t>(count * width));
  at += count;
}

// The layer as a Megatron trainer holds it (heads of kMegatronHead rows), by Megatron's
// names, without the "decoder.layers.0." prefix: linear_qkv interleaved by
// the kv heads' groups, linear_fc1 [gate; up], linear_proj and linear_fc2 as o_proj and
// down_proj.
inline std::map<std::string, Tensor> MegatronSources() {
  const std::map<std::string, Tensor> hf = Sources();
  const Tensor& q = hf.at("q_proj");
  const Tensor& k = hf.at("k_proj");
  const int64_t groups = k.shape()[0] / kMegatronHead, cols = q.shape()[1];
  const int64_t per_group = q.shape()[0] / groups;
  Tensor qkv = *Tensor::Empty({q.shape()[0] + 2 * k.shape()[0], cols}, DType::kBFloat16);
  int64_t at = 0;
  for (int64_t g = 0; g < groups; ++g) {
    CopyRows(q, g * per_group, per_group, qkv, at);
    CopyRows(k, g * kMegatronHead, kMegatronHead, qkv, at);
    CopyRows(hf.at("v_proj"), g * kMegatronHead, kMegatronHead, qkv, at);
  }
  const Tensor& gate = hf.at("gate_proj");
  Tensor fc1 = *Tensor::Empty({2 * gate.shape()[0], cols}, DType::kBFloat16);
  at = 0;
  CopyRows(gate, 0, gate.shape()[0], fc1, at);
  CopyRows(hf.at("up_proj"), 0, gate.shape()[0], fc1, at);
  return {{"self_attention.linear_qkv.weight", qkv},
          {"mlp.linear_fc1.weight", fc1},
          {"self_attention.linear_proj.weight", hf.at("o_proj")},
          {"mlp.linear_fc2.weight", hf.at("down_proj")}};
}

inline std::shared_ptr<const DeviceMesh> World() {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({g_world->size()}));
}

// A DTensor over the world of local `shape` (0xFF bytes) and `placements`, its global
// shape the local's with dim `dim` times the ranks (none for Replicate).
inline Value Buffer(const IntVector& shape, DType dtype, const char* placements, int dim) {
  IntVector global = shape;
  if (dim >= 0) global[static_cast<size_t>(dim)] *= g_world->size();
  Tensor local = *Tensor::Empty(shape, dtype);
  if (local.nbytes() > 0) std::memset(local.data_ptr(), 0xFF, local.nbytes());
  return Value(*DTensor::Make(local, World(), *ParsePlacements(placements), global));
}

inline DType CodesDType(const json& c) {
  return c["fp8"] == "e5m2" ? DType::kFloat8E5M2 : DType::kFloat8E4M3FN;
}

// The engine's FP8 buffers of case `c` on this rank, with their scales.
inline Map EngineBuffers(const json& c) {
  const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
  const bool block = c["block"].get<int64_t>() > 0;
  const DType scale = c["scale_format"] == "e8m0" ? DType::kFloat8E8M0FNU : DType::kFloat32;
  Map engine;
  for (const char* key : kDestinations) {
    const bool fused = std::string(key) == "qkv_proj" || std::string(key) == "gate_up_proj";
    const int dim = fused ? 0 : 1;
    const char* placements = fused ? "[S(0)]" : "[S(1)]";
    const IntVector codes = mine[key]["codes_shape"].get<IntVector>();
    engine.Set(HfName(key), Buffer(codes, CodesDType(c), placements, dim));
    const IntVector scales = mine[key]["scales_shape"].get<IntVector>();
    engine.Set(HfName(key) + (block ? "_scale_inv" : "_scale"),
               block ? Buffer(scales, scale, placements, dim)
                     : Buffer(scales, scale, "[R]", -1));
  }
  return engine;
}

inline void ExpectGolden(const json& c, const Map& engine, const std::string& what) {
  const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
  const bool block = c["block"].get<int64_t>() > 0;
  for (const char* key : kDestinations) {
    const std::string where = absl::StrCat(c["name"].get<std::string>(), " ", what, " ", key,
                                           " on rank ", g_world->rank());
    const Value* codes = engine.Find(HfName(key));
    const Value* scales = engine.Find(HfName(key) + (block ? "_scale_inv" : "_scale"));
    ASSERT_TRUE(codes != nullptr && scales != nullptr) << where;
    EXPECT_EQ(Fnv(codes->as_dtensor().local()), mine[key]["codes_fnv"].get<std::string>())
        << where;
    EXPECT_EQ(Raw(scales->as_dtensor().local()), mine[key]["scales"].get<std::vector<int64_t>>())
        << where;
  }
}

// The trainer: every source cut by fsdp (Shard(0)) over the world.
inline Map FsdpSources(const std::map<std::string, Tensor>& sources) {
  Map m;
  for (const auto& [key, full] : sources) {
    m.Set(HfName(key), Value(*DistributeTensor(full, World(), *ParsePlacements("[S(0)]"),
                                               g_world->rank())));
  }
  return m;
}

inline ReshardOptions MapOptions() {
  ReshardOptions options;
  options.comm = g_world;
  options.weight_map = *WeightMap::Builtin("vllm-llama", 128);
  return options;
}

// `plan` bound to `trainer` and fresh buffers of case `c`, executed twice (the codes
// overwritten in between): the golden's codes and scales both times.
inline void ExpectBoundTwice(const ReshardPlan& plan, const Map& trainer, const json& c,
                             const std::string& what) {
  Map engine = EngineBuffers(c);
  absl::StatusOr<BoundReshard> bound = BindReshard(plan, trainer, engine);
  ASSERT_TRUE(bound.ok()) << bound.status();
  for (int step = 0; step < 2; ++step) {
    for (const char* key : kDestinations) {
      const Tensor local = engine.Find(HfName(key))->as_dtensor().local();
      std::memset(local.data_ptr(), 0x55, local.nbytes());
    }
    ASSERT_TRUE(bound->Execute().ok()) << c["name"] << " " << what;
    ExpectGolden(c, engine, absl::StrCat(what, " step ", step));
  }
}

// vLLM's bfloat16 buffers of a dequant case on this rank (0xFF bytes).
inline Map Bf16Buffers(const json& c) {
  const json& shapes = Golden()["cases"][0]["ranks"][0];  // tp 1: the whole shapes
  Map engine;
  for (const char* key : kDestinations) {
    const bool fused = std::string(key) == "qkv_proj" || std::string(key) == "gate_up_proj";
    IntVector shape = shapes[key]["codes_shape"].get<IntVector>();
    const int64_t tp = c["tp"].get<int64_t>();
    if (fused) {
      // Rows per rank: [q; k; v] pieces, kv heads replicated past 2 ranks.
      const int64_t kv = std::string(key) == "qkv_proj" ? std::max<int64_t>(256 / tp, 128) : 0;
      shape[0] = std::string(key) == "qkv_proj" ? 512 / tp + 2 * kv : shape[0] / tp;
    } else {
      shape[1] /= tp;
    }
    engine.Set(HfName(key), Buffer(shape, DType::kBFloat16, fused ? "[S(0)]" : "[S(1)]",
                                   fused ? 0 : 1));
  }
  return engine;
}

inline void ExpectDequantized(const json& c, const Map& engine, const std::string& what) {
  const json& mine = c["ranks"][static_cast<size_t>(g_world->rank())];
  for (const char* key : kDestinations) {
    EXPECT_EQ(Fnv(engine.Find(HfName(key))->as_dtensor().local()),
              mine[key]["values_fnv"].get<std::string>())
        << c["name"] << " " << what << " " << key << " on rank " << g_world->rank();
  }
}

}  // namespace sdrt::testing_fp8_map

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_FP8_MAP_TEST_UTIL_H_
