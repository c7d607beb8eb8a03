// Where a sharded checkpoint folder is written (WriteShardedCheckpoint, and
// ShardedCheckpointFolder for several processes): the checks made before anything is
// written, that the index reads back and that the target may be replaced. Not public API.
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_CHECKPOINT_TARGET_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_CHECKPOINT_TARGET_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"

namespace sdrt::internal {

// The folder to write: `target` (out_dir without trailing slashes) in `parent`, named
// `base`; `exchange` when an existing sharded checkpoint there is to be swapped out.
struct CheckpointTarget {
  std::string target;
  std::string parent;
  std::string base;
  bool exchange = false;
};

// What is written must be what the reader accepts (a name it refuses, metadata that makes
// index.json larger than it reads): checked on the index text before anything is written,
// so a refused checkpoint is never left for `--overwrite` to refuse in turn; and it is of
// the format this sdrt writes (kShardedCheckpointFormatVersion). InvalidArgument naming
// `source_name`.
absl::Status CheckIndexWritable(const ShardedCheckpointIndex& index, const std::string& source_name,
                                const std::string& out_dir);

// `out_dir` may be written: absent, an empty folder, or (with `overwrite`) a sharded
// checkpoint sdrt wrote and nothing else. InvalidArgument when it names no folder to create;
// AlreadyExists naming the entry or rule otherwise; errno's status for lstat or opendir.
absl::StatusOr<CheckpointTarget> PrepareCheckpointTarget(const std::string& out_dir,
                                                         bool overwrite);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_CHECKPOINT_TARGET_H_
