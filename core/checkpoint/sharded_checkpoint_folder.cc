// ShardedCheckpointFolder and WriteShardedRankFile (core/checkpoint/sharded_checkpoint.h):
// WriteShardedCheckpoint's checks, temporary folder and installation, with the rank files
// written by whichever process holds each rank's pieces.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/internal/checkpoint_target.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

struct ShardedCheckpointFolder::State {
  ShardedCheckpointIndex index;
  internal::CheckpointTarget where;
  internal::AtomicFolder tmp;
};

ShardedCheckpointFolder::ShardedCheckpointFolder(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
ShardedCheckpointFolder::ShardedCheckpointFolder(ShardedCheckpointFolder&&) noexcept = default;
ShardedCheckpointFolder::~ShardedCheckpointFolder() = default;

const std::string& ShardedCheckpointFolder::path() const { return state_->tmp.path(); }
const ShardedCheckpointIndex& ShardedCheckpointFolder::index() const { return state_->index; }

absl::StatusOr<ShardedCheckpointFolder> ShardedCheckpointFolder::Begin(
    ShardedCheckpointIndex index, const std::string& out_dir, const std::string& source_name,
    bool overwrite) {
  if (index.mesh == nullptr || index.world_size != index.mesh->num_ranks() ||
      static_cast<int64_t>(index.files.size()) != index.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": an index without its mesh or files"));
  }
  SDRT_RETURN_IF_ERROR(internal::CheckIndexWritable(index, source_name, out_dir));
  SDRT_ASSIGN_OR_RETURN(internal::CheckpointTarget where,
                        internal::PrepareCheckpointTarget(out_dir, overwrite));
  SDRT_ASSIGN_OR_RETURN(internal::AtomicFolder tmp,
                        internal::AtomicFolder::Create(where.parent, where.base));
  index.dir = out_dir;
  return ShardedCheckpointFolder(
      std::unique_ptr<State>(new State{std::move(index), std::move(where), std::move(tmp)}));
}

absl::Status ShardedCheckpointFolder::Finish() {
  SDRT_ASSIGN_OR_RETURN(const std::string json, internal::SerializeIndex(state_->index));
  SDRT_RETURN_IF_ERROR(internal::WriteNewFile(
      absl::StrCat(state_->tmp.path(), "/", kShardedCheckpointIndexName), json));
  return state_->tmp.Install(state_->where.parent, state_->where.target, state_->where.exchange);
}

absl::Status WriteShardedRankFile(const std::string& folder, const ShardedCheckpointIndex& index,
                                  int64_t rank,
                                  const std::vector<std::pair<std::string, Tensor>>& locals) {
  if (index.format_version != kShardedCheckpointFormatVersion || index.mesh == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank file ", rank, ": an index of format_version ", index.format_version,
                     index.mesh == nullptr ? " without its mesh" : "", "; this sdrt writes ",
                     kShardedCheckpointFormatVersion));
  }
  if (rank < 0 || rank >= index.world_size || locals.size() != index.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank file ", rank, " of ", index.world_size,
                                                   ": ", locals.size(), " tensors for an index of ",
                                                   index.tensors.size()));
  }
  std::vector<uint64_t> piece_hashes;
  piece_hashes.reserve(locals.size());
  for (size_t i = 0; i < locals.size(); ++i) {
    const ShardedCheckpointTensor& t = index.tensors[i];
    SDRT_ASSIGN_OR_RETURN(const IntVector local,
                          ComputeLocalShape(t.shape, *index.mesh, t.placements, rank));
    const Tensor& got = locals[i].second;
    if (locals[i].first != t.name || !got.defined() || got.dtype() != t.dtype ||
        got.shape() != local || !got.device().is_cpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank file ", rank, ": tensor ", t.name, " needs ", DTypeName(t.dtype),
                       ShapeToString(local), " on the CPU; got '", locals[i].first, "' ",
                       got.defined() ? got.ToString() : "undefined"));
    }
    // The bytes written, hashed here: never a hash carried over from where they came from.
    SDRT_ASSIGN_OR_RETURN(const uint64_t piece_hash, TensorXxh64(got));
    piece_hashes.push_back(piece_hash);
  }
  SDRT_ASSIGN_OR_RETURN(const uint64_t index_hash, internal::IndexXxh64(index));
  std::map<std::string, std::string> metadata = internal::RankMetadata(index, rank, index_hash);
  metadata[std::string(internal::kMetaPieceHashes)] = internal::FormatPieceHashes(piece_hashes);
  return WriteSafetensors(absl::StrCat(folder, "/", index.files[static_cast<size_t>(rank)]), locals,
                          metadata);
}

}  // namespace sdrt
