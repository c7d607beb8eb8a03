// The files of `sdrt gather` (tools/sdrt/gather.cc): its input, each rank's file of a
// sharded checkpoint as DTensors, and its output, one safetensors file or a Hugging Face
// folder that rank 0 plans, checks and writes.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_GATHER_FILES_H_
#define SDRT_TOOLS_SDRT_INTERNAL_GATHER_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/hf_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {

// What OUT is to be: the arguments that shape it.
struct GatherTarget {
  std::string in_dir;
  std::string out;
  bool overwrite = false;
  int64_t max_shard_bytes = 0;        // --max-shard-size, bytes
  bool max_shard_size_given = false;  // refused with a file OUT
};

// This rank's pieces of the sharded checkpoint `in_dir` (LoadRankShards) as a state dict of
// DTensors on the session's device; its index in *index. InvalidArgument when the folder
// has another world size than the session (naming both and the -n to run with);
// LoadRankShards' errors; a copy's to the device.
absl::StatusOr<Map> ReadRankShards(const std::string& in_dir, const Session& session,
                                   ShardedCheckpointIndex* index);

// Rank 0 (it alone writes, so it alone decides what OUT is), before any data moves: for a
// folder OUT (one ending in '/' or an existing folder) the plan of its files (PlanHfShards)
// in *plan, then the checks of OUT: never a link, inside INDIR, containing it or one of its
// files (output_path.h); a file OUT absent or a safetensors file it may replace, a folder
// OUT absent, empty or a Hugging Face folder it may replace (CheckHfCheckpointTarget).
// InvalidArgument for --max-shard-size with a file OUT.
absl::Status PlanOut(const GatherTarget& target, const ShardedCheckpointIndex& index,
                     std::optional<HfShardPlan>* plan);

// Rank 0: checks every gathered tensor against the index's xxh64 (bad input naming the
// rank files that hold it, CheckGatheredTensor), checks OUT again (nothing has become a
// link since PlanOut) and writes it atomically: a Hugging Face folder by `plan` when it is
// given (WriteHfCheckpoint), else one safetensors file in the index's order, with its
// metadata.
absl::Status CheckAndWrite(const GatherTarget& target, const ShardedCheckpointIndex& index,
                           const Map& gathered, const HfShardPlan* plan);

// Each tensor's bytes, in the index's order.
std::vector<int64_t> TensorBytes(const ShardedCheckpointIndex& index);

// The line saying what a written folder holds: "3 files of at most 1,000 bytes of tensors
// (model-00001-of-00003.safetensors ... model-00003-of-00003.safetensors) and
// model.safetensors.index.json", then how many tensors over the limit are alone in a file.
std::string DescribeFolder(const HfShardPlan& plan, int64_t max_shard_bytes,
                           const std::vector<int64_t>& nbytes);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_GATHER_FILES_H_
