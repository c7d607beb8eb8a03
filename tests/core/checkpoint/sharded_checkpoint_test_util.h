// Helpers shared by the sharded checkpoint tests (tests/core/checkpoint/sharded_checkpoint_test.cc,
// tests/tools/shard_test.cc): source state dicts with Llama-, BERT- and GPT-2-style names,
// and an independent reassembly of a sharded checkpoint folder on the CPU. Header-only;
// test code only.
#ifndef SDRT_TESTS_CORE_CHECKPOINT_SHARDED_CHECKPOINT_TEST_UTIL_H_
#define SDRT_TESTS_CORE_CHECKPOINT_SHARDED_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::test {

// Tensors of many ranks, sizes and dtypes with the names the tp plan knows: dims smaller
// than a mesh of 4 (empty shards), uneven dims, a 0-dim scalar, a zero-element tensor.
inline std::vector<std::pair<std::string, Tensor>> MixedStateDict() {
  std::vector<std::pair<std::string, Tensor>> out;
  uint32_t salt = 1;
  auto add = [&](const std::string& name, IntVector shape, DType dtype = DType::kFloat32) {
    out.emplace_back(name, HashBytes(shape, dtype, salt++));
  };
  // Llama.
  add("model.embed_tokens.weight", {10, 6});
  add("model.layers.0.self_attn.q_proj.weight", {6, 6}, DType::kBFloat16);
  add("model.layers.0.self_attn.q_proj.bias", {6}, DType::kBFloat16);
  add("model.layers.0.self_attn.k_proj.weight", {3, 6}, DType::kBFloat16);
  add("model.layers.0.self_attn.v_proj.weight", {2, 5});
  add("model.layers.0.self_attn.o_proj.weight", {6, 7});
  add("model.layers.0.self_attn.o_proj.bias", {6});
  add("model.layers.0.mlp.gate_proj.weight", {9, 6}, DType::kFloat16);
  add("model.layers.0.mlp.up_proj.weight", {1, 6});
  add("model.layers.0.mlp.down_proj.weight", {6, 3});
  add("model.layers.0.input_layernorm.weight", {6});
  add("model.norm.weight", {1});
  add("lm_head.weight", {10, 6});
  // BERT.
  add("encoder.layer.0.attention.self.query.weight", {5, 5});
  add("encoder.layer.0.attention.self.query.bias", {5});
  add("encoder.layer.0.attention.output.dense.weight", {5, 5}, DType::kFloat64);
  add("encoder.layer.0.attention.output.dense.bias", {5});
  add("encoder.layer.0.intermediate.dense.weight", {11, 5});
  add("encoder.layer.0.output.dense.weight", {5, 11});
  add("embeddings.position_ids", {1, 7}, DType::kInt64);
  // GPT-2 (Conv1D [in, out]).
  add("h.0.attn.c_attn.weight", {4, 12});
  add("h.0.attn.c_attn.bias", {12});
  add("h.0.attn.c_proj.weight", {4, 4});
  add("h.0.mlp.c_fc.weight", {4, 9}, DType::kInt8);
  add("wte.weight", {7, 4});
  // Odd ones.
  add("step", {}, DType::kInt64);
  add("empty.weight", {0, 3});
  add("cube", {5, 3, 2}, DType::kInt32);
  add("flags", {5}, DType::kBool);
  return out;
}

// Writes `tensors` to `path` with a metadata entry; returns the opened file.
inline SafetensorsFile WriteSource(const std::string& path,
                                   const std::vector<std::pair<std::string, Tensor>>& tensors) {
  const absl::Status written = WriteSafetensors(path, tensors, {{"format", "pt"}, {"who", "test"}});
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  return *std::move(file);
}

// A fresh folder under the test temporary root (removed first if present).
inline std::string FreshDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(TestTmpRoot()) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Reassembles every tensor of the checkpoint in `dir` from the rank files alone, placing
// each rank's local tensor by ComputeLocalShapeAndGlobalOffset's owned index lists, and
// checks: every rank file opens with SafetensorsFile and holds the local shape; every
// element of the full tensor is covered; replicas agree; the full bytes equal `source`'s
// and hash to the index's xxh64. Failures are reported with the tensor's name.
// The `bits` bits of element `i` of packed little-endian data (any width up to 64), and
// their replacement: the oracle's element access, bit by bit, independent of sdrt's copies.
inline uint64_t ElementBitsAt(const unsigned char* data, int64_t i, int bits) {
  uint64_t v = 0;
  if (bits % 8 == 0) {  // whole bytes, little-endian
    for (int k = 0; k < bits / 8; ++k) v |= uint64_t{data[i * (bits / 8) + k]} << (8 * k);
    return v;
  }
  for (int b = 0; b < bits; ++b) {
    const int64_t at = i * bits + b;
    v |= uint64_t{(data[at / 8] >> (at % 8)) & 1u} << b;
  }
  return v;
}
inline void SetElementBits(unsigned char* data, int64_t i, int bits, uint64_t v) {
  if (bits % 8 == 0) {
    for (int k = 0; k < bits / 8; ++k) {
      data[i * (bits / 8) + k] = static_cast<unsigned char>(v >> (8 * k));
    }
    return;
  }
  for (int b = 0; b < bits; ++b) {
    const int64_t at = i * bits + b;
    const unsigned mask = 1u << (at % 8);
    data[at / 8] = static_cast<unsigned char>(((v >> b) & 1) ? data[at / 8] | mask
                                                             : data[at / 8] & ~mask);
  }
}

inline void ExpectRoundTrip(const std::string& dir, const SafetensorsFile& source) {
  absl::StatusOr<ShardedCheckpointIndex> index = ReadShardedCheckpointIndex(dir);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->tensors.size(), source.entries().size());
  std::vector<SafetensorsFile> files;
  for (int64_t r = 0; r < index->world_size; ++r) {
    absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(index->RankFilePath(r));
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->metadata().at("sdrt.rank"), absl::StrCat(r));
    files.push_back(*std::move(f));
  }
  const DeviceMesh& mesh = *index->mesh;
  for (size_t i = 0; i < index->tensors.size(); ++i) {
    const ShardedCheckpointTensor& t = index->tensors[i];
    EXPECT_EQ(t.name, source.entries()[i].name) << "index order is the source's order";
    const Tensor expected = *source.Get(t.name);
    ASSERT_EQ(t.dtype, expected.dtype()) << t.name;
    ASSERT_EQ(t.shape, expected.shape()) << t.name;
    Tensor full = *Tensor::Zeros(t.shape, t.dtype);
    std::vector<bool> covered(static_cast<size_t>(full.numel()), false);
    const IntVector strides = ContiguousStrides(t.shape);
    const int bits = ElementBits(t.dtype);
    const int ndim = static_cast<int>(t.shape.size());
    for (int64_t r = 0; r < index->world_size; ++r) {
      absl::StatusOr<LocalShardInfo> info =
          ComputeLocalShapeAndGlobalOffset(t.shape, mesh, t.placements, r);
      ASSERT_TRUE(info.ok()) << t.name << ": " << info.status();
      absl::StatusOr<Tensor> local = files[r].Get(t.name);
      ASSERT_TRUE(local.ok()) << local.status();
      ASSERT_EQ(local->shape(), info->local_shape) << t.name << " rank " << r;
      std::vector<std::vector<int64_t>> lists;
      for (int d = 0; d < ndim; ++d) lists.push_back(OwnedIndices(*info, d));
      const auto* src = static_cast<const unsigned char*>(local->data_ptr());
      auto* dst = static_cast<unsigned char*>(full.data_ptr());
      IntVector idx(static_cast<size_t>(ndim), 0);
      for (int64_t k = 0; k < local->numel(); ++k) {
        int64_t offset = 0;
        for (int d = 0; d < ndim; ++d) offset += lists[d][idx[d]] * strides[d];
        if (covered[offset]) {
          ASSERT_EQ(ElementBitsAt(dst, offset, bits), ElementBitsAt(src, k, bits))
              << t.name << ": replicas disagree at element " << offset << " (rank " << r << ")";
        }
        SetElementBits(dst, offset, bits, ElementBitsAt(src, k, bits));
        covered[offset] = true;
        for (int d = ndim - 1; d >= 0; --d) {
          if (++idx[d] < info->local_shape[d]) break;
          idx[d] = 0;
        }
      }
    }
    for (size_t k = 0; k < covered.size(); ++k) {
      ASSERT_TRUE(covered[k]) << t.name << ": element " << k << " is on no rank";
    }
    ASSERT_EQ(full.nbytes(), expected.nbytes());
    if (full.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(full.data_ptr(), expected.data_ptr(), full.nbytes()), 0)
          << t.name << " with " << PlacementsToString(t.placements) << " is not byte-identical";
    }
    EXPECT_EQ(t.xxh64, *TensorXxh64(full)) << t.name;
  }
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_CHECKPOINT_SHARDED_CHECKPOINT_TEST_UTIL_H_
