// The fixture of the C API's weight map tests (c_api_weight_map_mpi_test.cc): a Hugging Face
// Llama-shaped safetensors file that rank 0 writes into g_dir (c_api_test_util.h), every
// element a function of its tensor and index, and a vLLM-style tensor-parallel engine's
// buffers for it (fused qkv_proj / gate_up_proj, a padded embedding, a plain norm) made
// through the C API, each knowing which rows of which file tensor it must hold. Test code
// only.
#ifndef SDRT_TESTS_C_API_C_API_LLAMA_UTIL_H_
#define SDRT_TESTS_C_API_C_API_LLAMA_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/c_api.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/c_api/c_api_test_util.h"

namespace sdrt {
namespace testing_c_api {

// A Hugging Face Llama-shaped file: 3 layers with 12 query heads of 2 rows each and 1, 2 and
// 4 kv heads (so that at 2 to 4 ranks some kv heads are cut and some replicated), gate and
// up projections of 12 rows, a 10-row embedding, a norm; every element distinct.
inline constexpr int64_t kHeadSize = 2;
inline constexpr int64_t kCols = 3;
inline constexpr int64_t kQHeads = 12;
inline constexpr int64_t kMlpRows = 12;
inline constexpr int64_t kVocab = 10;
inline constexpr int64_t kPaddedVocab = 64;  // the built-in map pads the vocabulary to 64 rows
inline constexpr int kLayers = 3;
inline constexpr int64_t kKvHeads[kLayers] = {1, 2, 4};
inline constexpr const char* kProjections[] = {"self_attn.q_proj", "self_attn.k_proj",
                                               "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"};

inline std::string LlamaPath() { return g_dir + "/llama.safetensors"; }

inline std::string LayerName(int layer, const std::string& what) {
  return "model.layers." + std::to_string(layer) + "." + what + ".weight";
}

struct HfTensor {
  std::string name;
  int64_t rows;
};

// The file's tensors, in its order (a tensor's index makes its values).
inline const std::vector<HfTensor>& HfTensors() {
  static const std::vector<HfTensor>* tensors = [] {
    auto* t = new std::vector<HfTensor>{{"model.embed_tokens.weight", kVocab}};
    for (int l = 0; l < kLayers; ++l) {
      const int64_t kv = kKvHeads[l] * kHeadSize;
      const int64_t rows[] = {kQHeads * kHeadSize, kv, kv, kMlpRows, kMlpRows};
      for (int p = 0; p < 5; ++p) t->push_back({LayerName(l, kProjections[p]), rows[p]});
    }
    t->push_back({"model.norm.weight", 2});
    return t;
  }();
  return *tensors;
}

inline int HfIndex(const std::string& name) {
  for (size_t t = 0; t < HfTensors().size(); ++t) {
    if (HfTensors()[t].name == name) return static_cast<int>(t);
  }
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

inline float HfValue(int t, int64_t i, int64_t j) { return 1.0f + t * 1000.0f + i * 10.0f + j; }

inline void WriteLlamaCheckpoint() {
  if (g_rank != 0) return;
  std::vector<std::pair<std::string, sdrt::Tensor>> tensors;
  for (int t = 0; t < static_cast<int>(HfTensors().size()); ++t) {
    const HfTensor& h = HfTensors()[t];
    sdrt::Tensor x = *sdrt::Tensor::Empty({h.rows, kCols}, sdrt::DType::kFloat32);
    for (int64_t i = 0; i < h.rows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) x.data<float>()[i * kCols + j] = HfValue(t, i, j);
    }
    tensors.emplace_back(h.name, x);
  }
  ASSERT_TRUE(sdrt::WriteSafetensors(LlamaPath(), tensors).ok());
}

// Whether layer l's kv heads fit this world: cut into whole heads, or each replicated on
// the ranks that share it (vLLM's rule; 2 kv heads cannot go to 3 ranks).
inline bool LayerFits(int l) { return kKvHeads[l] % g_size == 0 || g_size % kKvHeads[l] == 0; }

// This rank's rows of a component of `rows` rows in a buffer fused by vLLM's tensor
// parallelism: rows / ranks of them (whole heads of `unit` rows), or with fewer heads than
// ranks head rank / (ranks / heads).
inline std::pair<int64_t, int64_t> PartRows(int64_t rows, int64_t unit) {
  const int64_t heads = rows / unit;
  if (heads % g_size == 0) {
    const int64_t n = rows / g_size;
    return {g_rank * n, g_rank * n + n};
  }
  const int64_t head = g_rank / (g_size / heads);
  return {head * unit, head * unit + unit};
}

// The engine's buffers, vLLM-style, each Shard(0) over the world (tensor parallel): per
// layer that fits, a fused qkv_proj ([q rows; k rows; v rows] of this rank) and gate_up_proj
// ([gate rows; up rows]); the embedding padded to 64 rows; the norm plain. Each buffer
// knows which rows of which file tensor it must hold, then zero rows (the padding).
struct VllmEngine {
  struct Segment {
    int tensor;
    int64_t begin, end;
  };
  struct Entry {
    std::string name;
    std::vector<Segment> segments;
    int64_t zero_rows = 0;
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<MeshSpec> spec;
  };
  std::vector<Entry> entries;
  sdrt_state_dict_t sd = nullptr;
  // `bad_qkv_rows`: added to every qkv_proj buffer's rows (a layout no rule can fill).
  explicit VllmEngine(int64_t bad_qkv_rows = 0) {
    EXPECT_EQ(sdrt_state_dict_create(&sd), SDRT_OK);
    for (int l = 0; l < kLayers; ++l) {
      if (!LayerFits(l)) continue;
      for (const char* fused : {"self_attn.qkv_proj", "mlp.gate_up_proj"}) {
        Entry e;
        e.name = LayerName(l, fused);
        const bool qkv = fused[0] == 's';
        for (int p = qkv ? 0 : 3; p < (qkv ? 3 : 5); ++p) {
          const int t = HfIndex(LayerName(l, kProjections[p]));
          const auto [begin, end] = PartRows(HfTensors()[t].rows, qkv ? kHeadSize : 1);
          e.segments.push_back({t, begin, end});
        }
        Add(std::move(e), qkv ? bad_qkv_rows : 0);
      }
    }
    Entry embed;
    embed.name = "model.embed_tokens.weight";
    const auto [r0, r1] = Chunk(kPaddedVocab, g_size, g_rank);
    embed.segments.push_back({0, std::min(r0, kVocab), std::min(r1, kVocab)});
    embed.zero_rows = (r1 - r0) - (std::min(r1, kVocab) - std::min(r0, kVocab));
    Add(std::move(embed), 0, kPaddedVocab);
    Entry norm;
    norm.name = "model.norm.weight";
    norm.segments.push_back({HfIndex(norm.name), 0, 2});
    Add(std::move(norm), 0, -1, /*plain=*/true);
  }
  ~VllmEngine() { sdrt_state_dict_destroy(sd); }

  // `global_rows`: -1 for the local rows times the ranks.
  void Add(Entry e, int64_t extra_rows, int64_t global_rows = -1, bool plain = false) {
    int64_t rows = e.zero_rows + extra_rows;
    for (const Segment& s : e.segments) rows += s.end - s.begin;
    e.buffer = std::make_unique<Buffer>(rows, kCols, kCols);
    if (!plain) {
      e.spec = std::make_unique<MeshSpec>("S(0)", global_rows >= 0 ? global_rows : rows * g_size,
                                          kCols);
    }
    EXPECT_EQ(sdrt_state_dict_add(sd, e.name.c_str(), &e.buffer->dl,
                                  plain ? nullptr : &e.spec->spec),
              SDRT_OK)
        << sdrt_last_error();
    entries.push_back(std::move(e));
  }

  // Every row holds what its segment says, times `scale`; padding rows are zero.
  void ExpectLoaded(float scale = 1.0f) const {
    for (const Entry& e : entries) {
      int64_t row = 0;
      for (const Segment& s : e.segments) {
        for (int64_t i = s.begin; i < s.end; ++i, ++row) {
          for (int64_t j = 0; j < kCols; ++j) {
            ASSERT_EQ(e.buffer->at(row, j), scale * HfValue(s.tensor, i, j))
                << "rank " << g_rank << " " << e.name << " local row " << row << " ("
                << HfTensors()[s.tensor].name << " row " << i << ")";
          }
        }
      }
      for (int64_t k = 0; k < e.zero_rows; ++k, ++row) {
        for (int64_t j = 0; j < kCols; ++j) {
          ASSERT_EQ(e.buffer->at(row, j), 0.0f) << "rank " << g_rank << " " << e.name
                                                << " padding row " << row;
        }
      }
    }
  }
  void Scale(float scale) {
    for (Entry& e : entries) {
      for (float& x : e.buffer->data) x *= scale;
    }
  }
};

}  // namespace testing_c_api
}  // namespace sdrt

#endif  // SDRT_TESTS_C_API_C_API_LLAMA_UTIL_H_
