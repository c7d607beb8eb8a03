// index.json of a sharded checkpoint (docs/ARCHITECTURE.md, "Sharded checkpoints"): its
// serialisation and its validating parser, and the metadata every rank file carries.
// Private to core/checkpoint/.
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tensor/dtensor/device_mesh.h"

namespace sdrt::internal {

// InvalidArgument "<where>: <what>", the form of every index and rank-file error.
absl::Status CheckpointError(const std::string& where, absl::string_view what);

// "2x2".
std::string MeshShapeString(const DeviceMesh& mesh);

// The `__metadata__` entries of rank file `rank`: sdrt.format_version, sdrt.rank,
// sdrt.world_size, sdrt.mesh and, when the mesh names its dims, sdrt.mesh_dim_names.
std::map<std::string, std::string> RankMetadata(const DeviceMesh& mesh, int64_t rank);

// index.json's text for `index` (one space of indentation, a final newline).
// InvalidArgument when the JSON library refuses a value (a name that is not UTF-8).
absl::StatusOr<std::string> SerializeIndex(const ShardedCheckpointIndex& index);

// Parses and validates index.json's `text` read from `path` (named in every error) of the
// folder `dir`: every field present, of its type and in range, no unknown field, the
// format and version this sdrt reads, the mesh's product equal to world_size (at most
// kMaxShardedCheckpointRanks), the rank file names, tensor names unique, dtypes known,
// placements one per mesh dim and never Partial. Does not look at the rank files.
// InvalidArgument naming the path, the field and the rule.
absl::StatusOr<ShardedCheckpointIndex> ParseIndex(absl::string_view text, const std::string& path,
                                                  const std::string& dir);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_
