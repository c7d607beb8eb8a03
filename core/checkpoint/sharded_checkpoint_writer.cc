// Writing sharded checkpoints: everything that can be refused is refused first, then one
// rank file at a time is cut from the source (a view or DistributeTensor's copy) into an
// AtomicFolder (core/io/atomic_file.h) that is moved into place at the end, so a reader
// sees the old checkpoint or the new one, never a part. The format:
// core/checkpoint/sharded_checkpoint.h.
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/checkpoint/internal/checkpoint_target.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/io/atomic_file.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// The local tensor of `rank`: a view of `full` when the piece is one contiguous slice of it
// (no copy), else DistributeTensor's copy.
absl::StatusOr<Tensor> CutLocal(const Tensor& full, const std::shared_ptr<const DeviceMesh>& mesh,
                                const std::vector<Placement>& placements, int64_t rank) {
  SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                        ComputeLocalShapeAndGlobalOffset(full.shape(), *mesh, placements, rank));
  if (info.is_slice) {
    Tensor view = full;
    for (int d = 0; d < full.dim(); ++d) {
      SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, info.global_offset[d], info.local_shape[d]));
    }
    if (view.is_contiguous()) return view;
  }
  SDRT_ASSIGN_OR_RETURN(DTensor piece, DistributeTensor(full, mesh, placements, rank));
  return piece.local();
}

}  // namespace

absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const SafetensorsFile& source, std::shared_ptr<const DeviceMesh> mesh, const ShardingPlan& plan,
    const std::string& out_dir, const WriteShardedCheckpointOptions& options) {
  return WriteShardedCheckpoint(CheckpointSource::FromFile(source, options.source_name),
                                std::move(mesh), plan, out_dir, options);
}

absl::StatusOr<ShardedCheckpointIndex> WriteShardedCheckpoint(
    const CheckpointSource& source, std::shared_ptr<const DeviceMesh> mesh,
    const ShardingPlan& plan, const std::string& out_dir,
    const WriteShardedCheckpointOptions& options) {
  const std::string& src = options.source_name;
  if (source.kind() == CheckpointKind::kShardedFolder) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WriteShardedCheckpoint: ", source.path(),
        " is an sdrt sharded folder, not a full checkpoint (reshard it: ReshardStateDict, "
        "`sdrt reshard`)"));
  }
  if (mesh == nullptr) return absl::InvalidArgumentError("WriteShardedCheckpoint: null mesh");
  for (int64_t i = 0; i < mesh->num_ranks(); ++i) {
    if (mesh->ranks()[static_cast<size_t>(i)] != i) {
      return absl::InvalidArgumentError(absl::StrCat(
          "WriteShardedCheckpoint: the mesh must be over ranks 0..N-1 in row-major order, got ",
          mesh->ToString()));
    }
  }
  if (mesh->num_ranks() > kMaxShardedCheckpointRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteShardedCheckpoint: the mesh ", mesh->ToString(), " has more than ",
                     kMaxShardedCheckpointRanks, " ranks (one file each)"));
  }
  SDRT_RETURN_IF_ERROR(plan.CheckMesh(*mesh));

  // Everything that can be refused is refused before anything is written.
  ShardedCheckpointIndex index;
  index.world_size = mesh->num_ranks();
  index.mesh = mesh;
  index.plan = plan.name();
  index.metadata = source.metadata();
  for (int64_t r = 0; r < index.world_size; ++r) {
    index.files.push_back(RankFileName(r, index.world_size));
  }
  for (const CheckpointSourceTensor& e : source.tensors()) {
    ShardedCheckpointTensor t;
    t.name = e.name;
    t.dtype = e.dtype;
    t.shape = e.shape;
    absl::StatusOr<std::vector<Placement>> placements = plan.PlacementsFor(e.name, e.shape, *mesh);
    if (!placements.ok()) {
      return absl::Status(placements.status().code(),
                          absl::StrCat(src, ": ", placements.status().message()));
    }
    t.placements = *std::move(placements);
    if (absl::Status cut =
            internal::CheckShardingCutsWholeBytes(e.name, e.dtype, e.shape, *mesh, t.placements);
        !cut.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": ", cut.message()));
    }
    absl::StatusOr<IntVector> local = ComputeLocalShape(t.shape, *mesh, t.placements, 0);
    if (!local.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": tensor ", e.name, " with ",
                                                     PlacementsToString(t.placements), ": ",
                                                     local.status().message()));
    }
    index.tensors.push_back(std::move(t));
  }

  SDRT_RETURN_IF_ERROR(internal::CheckIndexWritable(index, src, out_dir));
  SDRT_ASSIGN_OR_RETURN(const internal::CheckpointTarget where,
                        internal::PrepareCheckpointTarget(out_dir, options.overwrite));
  index.dir = out_dir;
  SDRT_ASSIGN_OR_RETURN(internal::AtomicFolder tmp,
                        internal::AtomicFolder::Create(where.parent, where.base));

  // Hashes of the full tensors (the index is then complete, and its own hash known), then
  // one rank file at a time, each recording its pieces' hashes.
  for (ShardedCheckpointTensor& t : index.tensors) {
    SDRT_ASSIGN_OR_RETURN(const Tensor full, source.Get(t.name));
    SDRT_ASSIGN_OR_RETURN(t.xxh64, TensorXxh64(full));
  }
  SDRT_ASSIGN_OR_RETURN(const uint64_t index_hash, internal::IndexXxh64(index));
  for (int64_t r = 0; r < index.world_size; ++r) {
    std::vector<std::pair<std::string, Tensor>> locals;
    std::vector<uint64_t> piece_hashes;
    locals.reserve(index.tensors.size());
    piece_hashes.reserve(index.tensors.size());
    for (const ShardedCheckpointTensor& t : index.tensors) {
      SDRT_ASSIGN_OR_RETURN(const Tensor full, source.Get(t.name));
      if (NumShards(*mesh, t.placements) == 1) {
        locals.emplace_back(t.name, full);  // every rank holds the whole tensor
        piece_hashes.push_back(t.xxh64);
        continue;
      }
      absl::StatusOr<Tensor> local = CutLocal(full, mesh, t.placements, r);
      if (!local.ok()) {
        return absl::Status(
            local.status().code(),
            absl::StrCat(src, ": tensor ", t.name, " with ", PlacementsToString(t.placements),
                         " for rank ", r, ": ", local.status().message()));
      }
      SDRT_ASSIGN_OR_RETURN(const uint64_t piece_hash, TensorXxh64(*local));
      piece_hashes.push_back(piece_hash);
      locals.emplace_back(t.name, *std::move(local));
    }
    std::map<std::string, std::string> metadata = internal::RankMetadata(index, r, index_hash);
    metadata[std::string(internal::kMetaPieceHashes)] = internal::FormatPieceHashes(piece_hashes);
    SDRT_RETURN_IF_ERROR(
        WriteSafetensors(absl::StrCat(tmp.path(), "/", index.files[r]), locals, metadata));
  }
  SDRT_ASSIGN_OR_RETURN(const std::string json, internal::SerializeIndex(index));
  SDRT_RETURN_IF_ERROR(
      internal::WriteNewFile(absl::StrCat(tmp.path(), "/", kShardedCheckpointIndexName), json));
  SDRT_RETURN_IF_ERROR(tmp.Install(where.parent, where.target, where.exchange));
  return index;
}

}  // namespace sdrt
