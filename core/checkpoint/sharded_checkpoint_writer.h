// Writing a sharded checkpoint (the format of sharded_checkpoint.h) from a full checkpoint
// in one process: every rank's file cut from a CheckpointSource (checkpoint_source.h) or a
// safetensors file. Several processes writing their own ranks' files use
// ShardedCheckpointFolder and WriteShardedRankFile (sharded_checkpoint.h).
#ifndef SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_WRITER_H_
#define SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_WRITER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/export.h"
#include "sdrt/tensor/dtensor/device_mesh.h"

namespace sdrt SDRT_API {

struct WriteShardedCheckpointOptions {
  // Names the source in messages and is recorded nowhere else (SafetensorsFile does not
  // keep its path); e.g. the path it was opened from.
  std::string source_name = "<source>";
  // Replace `out_dir` when it already is an sdrt sharded checkpoint: an index.json that
  // ReadShardedCheckpointIndex accepts, the rank files it names and nothing else, all
  // regular files (what this writer makes). An empty folder is always replaced; any other
  // existing path (a folder with one more file, a link, a subfolder) is refused, untouched.
  bool overwrite = false;
};

// Cuts every tensor of `source` (the full state dict) by `plan` on `mesh` and writes the
// sharded checkpoint folder `out_dir`. Each rank's pieces are cut on the CPU by
// DistributeTensor (core/distributed/dtensor_ops.h; a fully replicated tensor is written from the
// source mapping without a copy) one rank at a time, so memory peaks at about one rank's
// share of the checkpoint. `mesh` must be over ranks 0..N-1 in row-major order (what
// DeviceMesh::Create and FromString make without explicit ranks), as the index records it.
//
// Atomic: everything is written into a temporary folder `.<name>.tmp.<pid>.<random>`
// beside `out_dir` (each file fsynced, then the folder), which is then renamed onto
// `out_dir` (an existing checkpoint, with `overwrite`, is swapped out by
// renameat2(RENAME_EXCHANGE) and then deleted; where the file system lacks it, it is moved
// aside first) and the parent folder is fsynced. On any error the temporary folder is
// removed and `out_dir` is left as it was.
//
// Returns the index written. InvalidArgument naming the source, the tensor and the rule
// for a mesh that is not over 0..N-1 in order or has more than kMaxShardedCheckpointRanks
// ranks, and for a plan that does not fit the mesh (CheckMesh, PlacementsFor);
// AlreadyExists when `out_dir` exists and is not replaceable (see `overwrite`; the message
// names the entry that makes it not a checkpoint); the
// errno's code for I/O failures (NotFound for a missing parent folder), naming the path.
absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const SafetensorsFile& source, std::shared_ptr<const DeviceMesh> mesh, const ShardingPlan& plan,
    const std::string& out_dir, const WriteShardedCheckpointOptions& options = {});

// The same for any full checkpoint source (checkpoint_source.h: one file, a Hugging Face
// folder, a folder of safetensors files): its tensors in source.tensors() order, its merged
// __metadata__ recorded; each tensor is read through source.Get. The SafetensorsFile form
// above is this over CheckpointSource::FromFile(source, options.source_name). A sharded
// folder's source is InvalidArgument before anything is written (it holds no full tensor).
absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const CheckpointSource& source, std::shared_ptr<const DeviceMesh> mesh,
    const ShardingPlan& plan, const std::string& out_dir,
    const WriteShardedCheckpointOptions& options = {});

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_WRITER_H_
