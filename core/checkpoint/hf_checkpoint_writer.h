// Writing a Hugging Face checkpoint folder: the layout huggingface_hub's save_torch_state_dict
// and transformers' save_pretrained write, and every Hugging Face loader reads:
//
//   out/                                   out/
//     model-00001-of-00003.safetensors       model.safetensors   (one file: no index)
//     model-00002-of-00003.safetensors
//     model-00003-of-00003.safetensors
//     model.safetensors.index.json   {"metadata": {"total_size": N}, "weight_map": {tensor: file}}
//
// The split is huggingface_hub's (split_state_dict_into_shards_factory, 2.4.0): the tensors
// are taken in the given order and added to the current file until the next one would take
// it over the limit, which starts a new file; a tensor larger than the limit on its own is
// put alone in a file of its own at once, and the current file keeps filling after it (so
// [2, 10, 3] with a limit of 5 gives the files [10], [2, 3]). total_size is the sum of the
// tensors' bytes (numel x element size), not of the files' sizes. The reader of these
// folders is CheckpointSource (checkpoint_source.h).
//
// The folder appears whole or not at all: it is written into an AtomicFolder beside the
// target (core/io/atomic_file.h) and renamed into place; on any error, or an interrupt
// (RemoveTemporaryPaths), the temporary folder is removed and the target left as it was.
#ifndef SDRT_CORE_CHECKPOINT_HF_CHECKPOINT_WRITER_H_
#define SDRT_CORE_CHECKPOINT_HF_CHECKPOINT_WRITER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/core/checkpoint/hf_folder.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// huggingface_hub's default max_shard_size, "5GB": 5 x 10^9 bytes.
inline constexpr int64_t kHfDefaultMaxShardBytes = 5'000'000'000;

// Parses a shard size limit as huggingface_hub's parse_size_to_int reads it, and more:
// a number, optionally with a fraction ("1.5GB"; truncated to whole bytes as int() does),
// then optional spaces and a unit, case-insensitive: KB, MB, GB, TB (powers of 1000, the
// only units huggingface_hub 2.4.0 knows), KiB, MiB, GiB, TiB (powers of 1024, as
// transformers' convert_file_size_to_int reads them), B or none (bytes; a whole number
// then). Surrounding spaces are ignored. "500MB" is 500,000,000, "2GiB" 2,147,483,648.
// Errors: InvalidArgument naming `text` for an empty or malformed text, an unknown unit,
// a sign, a value of 0 bytes or one above 2^63 - 1 bytes.
absl::StatusOr<int64_t> ParseMaxShardSize(absl::string_view text);

// Which file each tensor goes to.
struct HfShardPlan {
  // The file names in order: "model-00001-of-00003.safetensors", ... (five digits each, as
  // huggingface_hub writes them), or the one name kHfSingleFileName.
  std::vector<std::string> files;
  // Per file, the indices of its tensors (into the given list) in the given order.
  std::vector<std::vector<size_t>> file_tensors;
  // The sum of the tensors' bytes: the index's metadata.total_size.
  int64_t total_size = 0;
  // Whether there is an index (more than one file).
  bool sharded() const { return files.size() > 1; }
};

// The plan for tensors of `nbytes[i]` bytes each (numel x element size) under a limit of
// `max_shard_bytes` (>= 1), by the rule in this file's comment. No tensors gives one empty
// kHfSingleFileName. Errors: InvalidArgument for max_shard_bytes < 1, a negative size,
// bytes that sum above 2^63 - 1, or more than 99,999 files.
absl::StatusOr<HfShardPlan> PlanHfShards(absl::Span<const int64_t> nbytes, int64_t max_shard_bytes);

// Whether `out_dir` may be written by WriteHfCheckpoint: OK when it does not exist, is an
// empty folder, or (with `overwrite`) is exactly a Hugging Face folder this writer could
// have written: nothing but regular files (no links, folders or others), either only
// kHfSingleFileName, a valid safetensors file, or model.safetensors.index.json with the
// files it names, every one named model-0000i-of-0000N.safetensors for its N, the whole
// accepted by CheckpointSource::Open. Never anything else, so a folder of the user's is
// never deleted. Errors: AlreadyExists naming `out_dir` and what keeps it from being
// replaced (exists without `overwrite`; not a folder; the first entry or rule that does not
// fit); the errno's code when it cannot be examined.
absl::Status CheckHfCheckpointTarget(const std::string& out_dir, bool overwrite);

struct WriteHfCheckpointOptions {
  // The most bytes of tensor data per file (a tensor larger than this is alone in its
  // file); >= 1.
  int64_t max_shard_bytes = kHfDefaultMaxShardBytes;
  // Replace an existing folder that CheckHfCheckpointTarget accepts with overwrite
  // (swapped out atomically, then deleted).
  bool overwrite = false;
};

// Writes the tensors described by `specs` into the folder `out_dir` (a trailing '/' is
// ignored; its parent folder must exist) by PlanHfShards of their bytes: one safetensors
// file at a time, each file's tensors in the given order (header and data,
// WriteSafetensorsOptions::data_in_given_order), every file with `metadata` as its
// __metadata__ plus "format": "pt" when `metadata` has no "format" (huggingface_hub's loader,
// as transformers', refuses a file whose __metadata__ lacks it), and for more than one file
// the index (weight_map file by file in the given order, two-space indented as
// huggingface_hub's json.dump writes it, non-ASCII escaped). `source(i)` is called once per
// tensor with elements, in file order, and must give the tensor of specs[i]'s dtype and
// shape (WriteSafetensorsStreamed's contract); the writer holds no tensor after writing its
// bytes, so a caller producing them on demand keeps its memory near the largest one. The
// temporary folder
// (`.<name>.tmp.<pid>.<hex>` beside `out_dir`) is fsynced and renamed into place
// (AtomicFolder::Install; an existing folder, with `overwrite`, swapped out and deleted).
// Returns the plan written. Errors, before anything is written: InvalidArgument when
// `out_dir` names no folder ("", ".", ".."), for an empty name, a name given twice, a shape
// that is not a size, and, for more than one file, a name the index cannot carry
// ("__metadata__", not UTF-8); those of CheckHfCheckpointTarget and PlanHfShards. While writing:
// WriteSafetensorsStreamed's (InvalidArgument for the reserved name, `source`'s error or a tensor
// of another dtype or shape, naming the tensor); the errno's code for I/O failures (NotFound for a
// missing parent folder), naming the path. On any error the temporary folder is removed and
// `out_dir` is left as it was.
absl::StatusOr<HfShardPlan> WriteHfCheckpoint(const std::string& out_dir,
                                              absl::Span<const SafetensorsTensorSpec> specs,
                                              const SafetensorsTensorSource& source,
                                              const std::map<std::string, std::string>& metadata,
                                              const WriteHfCheckpointOptions& options = {});

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_HF_CHECKPOINT_WRITER_H_
