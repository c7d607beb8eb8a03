// The three paths of LoadStateDict (core/distributed/load_state_dict.h), one of which the
// public call runs once the ranks have agreed on the read (read_policy.h): every rank
// preads its own bytes (load_all.cc), the root reads and broadcasts (load_root.cc), the
// ranks reshard a sharded folder's rank files (load_sharded.cc). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_LOAD_PATHS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_LOAD_PATHS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/distributed/load_options.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// Each path takes this rank's source (nullptr where it could not be opened) and
// `precondition`, this rank's error found before (its open error, a source of the wrong
// kind), which the path's first agreement makes every rank's error. `options` were checked
// (CheckLoadOptions); `stats` was reset and holds the read and its reason, the path fills
// the rest.

// kAll: the staged pread of this rank's pieces. options.comm may be null.
absl::StatusOr<LoadResult> LoadEveryRank(const CheckpointSource* source,
                                         const absl::Status& precondition, Map& local,
                                         const LoadOptions& options, LoadStats& stats);

// kRoot: rank 0 of options.comm (required) reads its source, BroadcastStateDict sends.
absl::StatusOr<LoadResult> LoadFromRoot(const CheckpointSource* source,
                                        const absl::Status& precondition, Map& local,
                                        const LoadOptions& options, LoadStats& stats);

// A sharded folder: its rank files resharded into `local` over options.comm (required).
absl::StatusOr<LoadResult> LoadShardedFolder(const CheckpointSource* source,
                                             const absl::Status& precondition, Map& local,
                                             const LoadOptions& options, LoadStats& stats);

// The bytes of the tensors `value` holds on this rank: a DTensor's local, a
// ShardedTensor's local shards, a tensor; 0 for any other value.
int64_t LocalBytes(const Value& value);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_LOAD_PATHS_H_
