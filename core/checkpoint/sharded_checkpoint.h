// Sharded checkpoints on disk: a full safetensors state dict cut into one safetensors file
// per rank of a DeviceMesh, with an index that says how to put the pieces back together.
//
// A checkpoint is a folder:
//
//   index.json
//   rank-00000-of-00004.safetensors
//   ...
//   rank-00003-of-00004.safetensors
//
// index.json (format_version 2; every field is written, unknown fields are errors):
//
//   {
//     "format": "sdrt-sharded-checkpoint",
//     "format_version": 2,
//     "world_size": 4,
//     "mesh": {"shape": [2, 2], "dim_names": ["dp", "tp"]},   // dim_names [] when unnamed
//     "plan": "fsdp-tp",                                      // informational
//     "files": ["rank-00000-of-00004.safetensors", ...],      // rank order
//     "metadata": {"format": "pt"},                           // the source's __metadata__
//     "tensors": [                                            // the source's tensor order
//       {"name": "model.layers.0.self_attn.q_proj.weight", "dtype": "BF16",
//        "shape": [4096, 4096], "placements": "[_S(0, 2), S(0)]",
//        "xxh64": "0123456789abcdef"},
//       ...
//     ]
//   }
//
// The mesh is row-major over ranks 0..world_size-1 (DeviceMesh::Create with no ranks).
// "dtype" is the safetensors code; "shape" the global shape; "placements" PyTorch's
// printing (tensor/dtensor/placement.h), one per mesh dim, never Partial; "xxh64" the XXH64 (seed
// 0) of the full tensor's contiguous row-major little-endian bytes, 16 lower-case hex
// digits. The source's tensor order is the order of its bytes in the file
// (SafetensorsFile::entries()).
//
// Rank file r holds, under the same names and dtypes, the local tensor of every index
// tensor for rank r: ComputeLocalShapeAndGlobalOffset(shape, mesh, placements, r) gives its
// shape (possibly with zero elements) and, through OwnedIndices, where its elements sit in
// the full tensor (Full[I_0 x I_1 x ...]; tensor/sharding/sharding.h). Its __metadata__ holds
// "sdrt.format_version" ("2"), "sdrt.rank", "sdrt.world_size", "sdrt.mesh" ("2x2"), for a
// mesh with dim names "sdrt.mesh_dim_names" ("dp,tp"), the index's "sdrt.engine_layout"
// when it has one (kEngineLayoutMetadataKey), and what lets a reader check every piece it
// reads:
//   "sdrt.index_xxh64"  the XXH64 of the index.json text sdrt wrote with the file (16 hex
//                       digits): an index.json edited afterwards (a placement swapped for
//                       one with the same local shapes, a hash, a shape) no longer matches;
//   "sdrt.piece_xxh64"  the XXH64 of each local tensor's bytes (as TensorXxh64), 16 hex
//                       digits per tensor concatenated in index order: a changed byte of a
//                       piece no longer matches.
// The index's "xxh64" stays the full tensor's (what a gather checks). Format 1 (sdrt before
// piece hashes) is read too; its rank files lack the two keys, so only whole pieces (the
// full tensor) are checked as they are read (UncheckedPiecesWarning says so).
//
// Errors are absl::Status; messages name the folder or file, the tensor and the rule.
#ifndef SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt SDRT_API {

// The format_version this sdrt writes; it reads 1 to this.
inline constexpr int kShardedCheckpointFormatVersion = 2;
inline constexpr absl::string_view kShardedCheckpointFormat = "sdrt-sharded-checkpoint";
inline constexpr absl::string_view kShardedCheckpointIndexName = "index.json";
// The most ranks (files) a sharded checkpoint may have: the five digits of RankFileName.
inline constexpr int64_t kMaxShardedCheckpointRanks = 99999;
// The metadata key of a checkpoint whose tensors a weight map made for one layout (`sdrt
// shard` / `sdrt reshard --map` with a fuse or regroup holding its components per part),
// its value that layout as the command line gives it ("--mesh 2 --plan tp"). A fused tensor
// there holds each rank's parts one after another, so the checkpoint is read on that
// layout alone: LoadStateDict refuses to fill any other from such a sharded folder, and
// the CLI any other mesh or plan.
inline constexpr char kEngineLayoutMetadataKey[] = "sdrt.engine_layout";

// "rank-00002-of-00004.safetensors". Preconditions: 0 <= rank < world_size.
std::string RankFileName(int64_t rank, int64_t world_size);

// XXH64 (seed 0) of the bytes of `tensor` in contiguous row-major order (a non-contiguous
// tensor is hashed as Contiguous() would lay it out). CPU tensors only: InvalidArgument
// otherwise; ResourceExhausted when a contiguous copy cannot be made.
absl::StatusOr<uint64_t> TensorXxh64(const Tensor& tensor);
// The 16 lower-case hex digits index.json stores, "ef46db3751d8e999".
std::string FormatXxh64(uint64_t hash);

// One tensor of the index.
struct ShardedCheckpointTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  IntVector shape;                    // global shape, elements
  std::vector<Placement> placements;  // one per mesh dim
  uint64_t xxh64 = 0;                 // of the full tensor's bytes
};

// A parsed and validated index.json.
struct ShardedCheckpointIndex {
  std::string dir;  // the folder as given
  int format_version = kShardedCheckpointFormatVersion;
  int64_t world_size = 0;
  std::shared_ptr<const DeviceMesh> mesh;  // shape + dim names, ranks 0..world_size-1
  std::string plan;
  std::vector<std::string> files;                // rank file names (not paths), rank order
  std::map<std::string, std::string> metadata;   // the source file's __metadata__
  std::vector<ShardedCheckpointTensor> tensors;  // source order

  // dir + "/" + files[rank]. Precondition: 0 <= rank < world_size.
  std::string RankFilePath(int64_t rank) const;
  // The tensor named `name`, or nullptr. A linear search: for many names, ByName.
  const ShardedCheckpointTensor* Find(absl::string_view name) const;
  // Every tensor by its name (views of `tensors`: valid while they are not changed).
  absl::flat_hash_map<absl::string_view, const ShardedCheckpointTensor*> ByName() const;
  // The tensor list (names, dtypes, global shapes) in index order, e.g. for
  // ShardingPlan::MetaStateDict or a header to write.
  std::vector<SafetensorsTensorSpec> TensorSpecs() const;
};

// Writing a sharded checkpoint from several processes, each holding its own ranks' pieces
// (`sdrt reshard`): the folder still appears whole, as WriteShardedCheckpoint's does.
//   the installing process: folder = ShardedCheckpointFolder::Begin(index, out_dir, ...);
//                           it shares folder.path() with the others
//   every process:          WriteShardedRankFile(path, index, rank, locals) for its ranks
//   (all agree that every rank file was written)
//   the installing process: folder.Finish(); or drops the folder, which removes it
class ShardedCheckpointFolder {
 public:
  // Checks what WriteShardedCheckpoint checks before writing (`index` reads back; out_dir
  // absent, an empty folder, or with `overwrite` an sdrt sharded checkpoint and nothing
  // else) and makes the temporary folder beside out_dir. `index` needs every field but
  // dir (the tensors with their xxh64, the files, the mesh over ranks 0..N-1). Errors as
  // WriteShardedCheckpoint's before it writes (InvalidArgument naming `source_name`,
  // AlreadyExists, errno's status).
  static absl::StatusOr<ShardedCheckpointFolder> Begin(ShardedCheckpointIndex index,
                                                       const std::string& out_dir,
                                                       const std::string& source_name,
                                                       bool overwrite);
  ShardedCheckpointFolder(ShardedCheckpointFolder&&) noexcept;
  ~ShardedCheckpointFolder();

  // The temporary folder the rank files go into (the same path on every process of one
  // machine or shared file system).
  const std::string& path() const;
  const ShardedCheckpointIndex& index() const;
  // Writes index.json and moves the folder onto out_dir (swapping out a checkpoint there
  // when Begin allowed it). Call once, after every rank file is in path(). Errors: those
  // of the writes and renames; the folder is then removed.
  absl::Status Finish();

 private:
  struct State;
  explicit ShardedCheckpointFolder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Writes rank `rank`'s file of `index` into `folder` (a ShardedCheckpointFolder's path):
// `locals` are the rank's local tensors in index order, each of the index's dtype and the
// local shape ComputeLocalShape gives (any strides, CPU), written as WriteShardedCheckpoint
// writes them (the same bytes and metadata for the same pieces): each local is hashed for
// sdrt.piece_xxh64 here, and `index` must be the one the folder's Begin took (its
// sdrt.index_xxh64). InvalidArgument naming the tensor for a local that does not fit, and
// for an index of another format_version than kShardedCheckpointFormatVersion; the errors
// of WriteSafetensors.
absl::Status WriteShardedRankFile(const std::string& folder, const ShardedCheckpointIndex& index,
                                  int64_t rank,
                                  const std::vector<std::pair<std::string, Tensor>>& locals);

struct ReadShardedCheckpointOptions {
  // Also open every rank file (SafetensorsFile::Open: header and layout validation, no
  // tensor bytes read) and check it against the index (CheckRankFile).
  bool check_rank_files = true;
};

// Reads and validates `dir`/index.json: JSON syntax, every field present with its type,
// format and format_version, world_size == product of the mesh shape, the file names
// RankFileName gives, present as regular files in `dir`; per tensor a non-empty unique
// name, a known dtype code, a non-negative shape, one non-Partial placement per mesh dim
// whose shard dims the tensor has, 16 hex digits of hash. InvalidArgument naming the file
// (and the tensor) and the rule for every failure, including a missing folder, index.json
// or rank file, and the errors of CheckRankFile when check_rank_files.
absl::StatusOr<ShardedCheckpointIndex> ReadShardedCheckpointIndex(
    const std::string& dir, const ReadShardedCheckpointOptions& options = {});

// Checks that `file` (the opened rank file of `rank`) matches `index`: its __metadata__
// names this format version, rank, world size and mesh; it holds exactly the index's
// tensors, each with the index's dtype and the local shape ComputeLocalShape gives for
// `rank`; from format 2, its sdrt.index_xxh64 is that of `index` (the index.json it was
// written with) and its sdrt.piece_xxh64 holds one hash per tensor. Reads no tensor byte.
// InvalidArgument naming the file, the tensor and what differs.
absl::Status CheckRankFile(const ShardedCheckpointIndex& index, int64_t rank,
                           const SafetensorsFile& file);

// One rank's part of a sharded checkpoint.
struct RankShards {
  ShardedCheckpointIndex index;
  int64_t rank = 0;
  // Index order. Each DTensor's local tensor is a zero-copy view of the rank file's
  // mapping where aligned (read-only: Clone() it to modify; SafetensorsFile::Get), the
  // mesh is index.mesh, the placements and global shape the index's.
  std::vector<std::pair<std::string, DTensor>> tensors;

  // The tensors as a flat state dict (name -> DTensor value), index order.
  Map ToStateDict() const;
};

// Reads the index of `dir` (without opening the other ranks' files), opens the file of
// `rank`, checks it (CheckRankFile) and returns its tensors as DTensors built by
// DTensor::Make. Every piece it hands out is checked: hashed (XXH64, many GB/s) and compared
// with the rank file's sdrt.piece_xxh64, which CheckRankFile tied to index.json, and a piece
// that is the whole tensor (local shape == global shape) with the index's xxh64 too. Every
// verb reading rank files reads them here. In a format 1 folder only whole pieces can be
// checked (UncheckedPiecesWarning). InvalidArgument for a rank outside [0, world_size), for
// every error of ReadShardedCheckpointIndex and CheckRankFile (an edited index.json, a
// rank file of another checkpoint), for any error of SafetensorsFile::Open (a truncated,
// garbled or missing rank file: "rank file R of N: " and the reader's message, which names
// the path) and for a piece whose hash differs (a damaged rank file: naming it, the tensor
// and both hashes); ResourceExhausted (naming the file and tensor) when a misaligned tensor
// cannot be copied.
absl::StatusOr<RankShards> LoadRankShards(const std::string& dir, int64_t rank);

// What LoadRankShards cannot check in a folder of `index`'s format, in one line for a
// warning (a command prints it once), e.g. "ckpt: format 1 rank files carry no piece
// hashes: ..."; empty when every piece read is checked (format 2 and later).
std::string UncheckedPiecesWarning(const ShardedCheckpointIndex& index);

// Checks `full`, the CPU tensor gathered from every rank's piece of `tensor` (one of
// index.tensors), against the index's xxh64. InvalidArgument when the hash differs, naming
// the tensor, both hashes, index.json and the paths of the rank files holding elements of
// the tensor (at most 8 named, then a count): one of them, or the index, is damaged or from
// another checkpoint. InvalidArgument for a non-CPU tensor (TensorXxh64).
absl::Status CheckGatheredTensor(const ShardedCheckpointIndex& index,
                                 const ShardedCheckpointTensor& tensor, const Tensor& full);

}  // namespace SDRT_API

#endif  // SDRT_CORE_CHECKPOINT_SHARDED_CHECKPOINT_H_
