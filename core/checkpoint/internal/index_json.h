// index.json of a sharded checkpoint (docs/ARCHITECTURE.md, "Sharded checkpoints"): its
// serialisation, its hash and its validating parser, and the metadata every rank file
// carries.
// Private to core/checkpoint/.
#ifndef SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_
#define SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

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

// The rank-file `__metadata__` keys that let a reader check what it reads (from format 2).
inline constexpr absl::string_view kMetaIndexHash = "sdrt.index_xxh64";
inline constexpr absl::string_view kMetaPieceHashes = "sdrt.piece_xxh64";
// The first format_version whose rank files carry them; the oldest this sdrt reads is 1.
inline constexpr int kPieceHashesFormatVersion = 2;

// The XXH64 (seed 0) of SerializeIndex(index), the index.json text sdrt writes for it:
// what a rank file's sdrt.index_xxh64 records. Whitespace aside, any edit of index.json
// changes it. The errors of SerializeIndex.
absl::StatusOr<uint64_t> IndexXxh64(const ShardedCheckpointIndex& index);

// The `__metadata__` entries rank file `rank` of `index` carries whatever its bytes:
// sdrt.format_version (index.format_version), sdrt.rank, sdrt.world_size, sdrt.mesh, when
// the mesh names its dims sdrt.mesh_dim_names, from format 2 sdrt.index_xxh64
// (`index_hash`, IndexXxh64), and the index's kEngineLayoutMetadataKey when it has one (a
// rank file that an older sdrt wrote may lack it). The writers add sdrt.piece_xxh64
// (FormatPieceHashes).
std::map<std::string, std::string> RankMetadata(const ShardedCheckpointIndex& index, int64_t rank,
                                                uint64_t index_hash);

// sdrt.piece_xxh64's value: each hash as 16 lower-case hex digits, concatenated.
std::string FormatPieceHashes(const std::vector<uint64_t>& hashes);
// Its parse: exactly `count` hashes, else InvalidArgument naming `where` and the rule.
absl::StatusOr<std::vector<uint64_t>> ParsePieceHashes(absl::string_view text, size_t count,
                                                       const std::string& where);

// index.json's text for `index` (one space of indentation, a final newline).
// InvalidArgument when the JSON library refuses a value (a name that is not UTF-8).
absl::StatusOr<std::string> SerializeIndex(const ShardedCheckpointIndex& index);

// Parses and validates index.json's `text` read from `path` (named in every error) of the
// folder `dir`: every field present, of its type and in range, no unknown field, the
// format and version this sdrt reads, the mesh's product equal to world_size (at most
// kMaxShardedCheckpointRanks), the rank file names, tensor names unique, dtypes known,
// placements one per mesh dim and never Partial, shapes of at most kMaxCopyDims dims.
// Format versions 1 (rank files without piece hashes) to kShardedCheckpointFormatVersion
// are read. Does not look at the rank files.
// InvalidArgument naming the path, the field and the rule.
absl::StatusOr<ShardedCheckpointIndex> ParseIndex(absl::string_view text, const std::string& path,
                                                  const std::string& dir);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_CHECKPOINT_INTERNAL_INDEX_JSON_H_
