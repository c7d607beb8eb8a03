// model.safetensors.index.json, the index of a Hugging Face checkpoint folder: its
// validating parser, its serialisation and the shard file names. Private to
// core/checkpoint/ (CheckpointSource reads it, WriteHfCheckpoint writes it; the fuzz
// target tests/fuzz/hf_index_fuzz.cc drives the parser directly).
//
// The format, as huggingface_hub's split_state_dict_into_shards_factory and transformers'
// save_pretrained write it:
//   {"metadata": {"total_size": 16060522496, ...}, "weight_map": {"<tensor>": "<file>", ...}}
// where total_size is the sum of numel x element size over the tensors the shard files hold
// (a storage shared by several tensors counted once; safetensors files never hold such
// duplicates, so it equals the sum over the files' tensors).
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_HF_INDEX_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_HF_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// The most shard files an index may name (and a folder of safetensors files may hold).
inline constexpr int64_t kMaxHfIndexFiles = 99999;

// A parsed and validated index.
struct HfIndex {
  // weight_map in the document's order: (tensor name, file name).
  std::vector<std::pair<std::string, std::string>> weight_map;
  // The distinct file names of weight_map, sorted by name (byte order): for the names
  // huggingface_hub writes, model-00001-of-0000N first.
  std::vector<std::string> files;
  // metadata.total_size, bytes, when the index has it.
  std::optional<int64_t> total_size;
  // Every field of "metadata": strings as they are, other values as compact JSON text
  // ("16060522496" for total_size). Empty when the index has no "metadata".
  std::map<std::string, std::string> metadata;
};

// Whether `name` may name a file directly inside the folder: non-empty, at most 255 bytes,
// no '/' and no NUL, neither "." nor "..". What it resolves to (a link) is checked by the
// caller.
bool IsPlainFileName(absl::string_view name);

// "model-00002-of-00003.safetensors" for i = 1, n = 3: shard i (from 0) of n, numbered
// from 1 with five digits or more, as huggingface_hub names them.
std::string HfShardFileName(int64_t i, int64_t n);

// The index text for `weight_map` (in its order; each tensor named once) and `total_size`:
// {"metadata": {"total_size": N}, "weight_map": {...}}, indented by two spaces, non-ASCII
// escaped as \uXXXX, no final newline: byte for byte what huggingface_hub's
// save_torch_state_dict writes (json.dump(index, f, indent=2)) for the same map. Bytes that
// are not UTF-8 are replaced by U+FFFD (the caller compares the parsed map with its names).
std::string SerializeHfIndex(const std::vector<std::pair<std::string, std::string>>& weight_map,
                             int64_t total_size);

// Parses `text`, read from `path` (named first in every error). Rules: strict JSON
// (internal/strict_json.h: a key named twice in one object, at any level, is refused); the
// top level an object with "weight_map" (required) and "metadata" (optional: null or an
// object); other top-level fields are ignored, as Hugging Face's readers ignore them.
// weight_map: an object of at least one entry, each key a tensor name (non-empty, not
// "__metadata__"), each value a string that IsPlainFileName accepts and that ends with
// ".safetensors"; at most kMaxHfIndexFiles distinct files. metadata.total_size, when
// present: an integer in [0, 2^63 - 1].
// Errors: InvalidArgument "<path>: <rule>", naming the field, the tensor and the file.
absl::StatusOr<HfIndex> ParseHfIndex(absl::string_view text, const std::string& path);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_HF_INDEX_H_
