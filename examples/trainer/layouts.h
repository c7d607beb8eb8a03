// The trainer example's model and the three layouts it moves between (README.md):
//   - the trainer's own: Megatron-core names, linear_qkv interleaved by query group
//     ([the group's q heads; its k head; its v head] for each kv head), linear_fc1 [gate; up];
//   - a vLLM-style engine's: qkv_proj per tensor-parallel rank [its q heads; its k heads; its
//     v heads] (a kv head replicated on several ranks when they outnumber the kv heads),
//     gate_up_proj [its gate rows; its up rows], vocabularies padded to a multiple of 64;
//   - Hugging Face's, for the exported checkpoint.
// Every element's value is defined once, on the Hugging Face tensors; the two other layouts
// say where each of their elements comes from. The checks use this arithmetic, written out
// from the layouts' public descriptions, independently of sdrt.
#ifndef SDRT_EXAMPLES_TRAINER_LAYOUTS_H_
#define SDRT_EXAMPLES_TRAINER_LAYOUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/shape.h"

namespace trainer_example {

// One Llama decoder layer with a vocabulary not a multiple of 64, heads of 128 rows (so
// every head is whole 128 x 128 FP8 blocks).
inline constexpr int64_t kHidden = 512, kHead = 128, kHeads = 4, kKvHeads = 2;
inline constexpr int64_t kIntermediate = 1024, kVocab = 1000, kPaddedVocab = 1024;

struct Weight {
  std::string name;
  sdrt::IntVector shape;
};

// The trainer's weights, by their Megatron-core names.
std::vector<Weight> MegatronWeights();

// The exported checkpoint's tensors, by Hugging Face's names, and each one's short key
// ("q_proj", "norm", ...) for HfValue.
struct HfWeight {
  std::string name, key;
  sdrt::IntVector shape;
};
std::vector<HfWeight> HfWeights();

// The value of element (row, col) of Hugging Face tensor `hf` (e.g. "q_proj",
// "input_layernorm"; 1-D tensors: row 0) after `step` training steps: a multiple of 1/8 in
// [-4, 4) plus step / 4, exact in bfloat16 for step < 100.
float HfValue(const std::string& hf, int64_t row, int64_t col, int step);

// Where an element comes from: Hugging Face tensor `hf` at (row, col), or none (a pad row).
struct Origin {
  std::string hf;  // empty: a pad row, zero
  int64_t row = 0, col = 0;
};

// Element (row, col) of the full Megatron tensor `name`.
Origin MegatronOrigin(const std::string& name, int64_t row, int64_t col);
// Element (row, col) of engine rank `rank`'s local of vLLM tensor `name`, `ranks` engine
// ranks (tensor parallel: column-parallel qkv/gate_up, row-parallel o/down, vocabularies cut
// by rows after padding, norms whole).
Origin VllmOrigin(const std::string& name, int64_t rank, int64_t ranks, int64_t row, int64_t col);

// The map from the trainer's names into the engine's: linear_qkv and linear_fc1 regrouped
// (interleaved by group -> cut by tensor-parallel part), the word embeddings and output layer
// padded to a multiple of 64 rows, the rest renamed.
sdrt::WeightMap MegatronToVllm();

}  // namespace trainer_example

#endif  // SDRT_EXAMPLES_TRAINER_LAYOUTS_H_
