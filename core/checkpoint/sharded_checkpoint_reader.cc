// Reading sharded checkpoints: index.json validated field by field (internal/index_json.h),
// every rank file checked against it, one rank's pieces loaded as DTensors; and the small
// functions reader and writer share. The format: core/checkpoint/sharded_checkpoint.h.
#include <sys/stat.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/checkpoint/internal/index_json.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/io/bounded_file.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "xxhash.h"

namespace sdrt {
namespace {

absl::Status Bad(const std::string& where, absl::string_view what) {
  return internal::CheckpointError(where, what);
}

// CheckRankFile with the index's hash (IndexXxh64) given, so that a caller checking many
// rank files of one index hashes it once. Returns the file's piece hashes in index order
// (none before format 2).
absl::StatusOr<std::vector<uint64_t>> CheckRankFileOf(const ShardedCheckpointIndex& index,
                                                      uint64_t index_hash, int64_t rank,
                                                      const SafetensorsFile& file) {
  const std::string path = index.RankFilePath(rank);
  const std::map<std::string, std::string> expected =
      internal::RankMetadata(index, rank, index_hash);
  for (const auto& [key, value] : expected) {
    if (key == internal::kMetaIndexHash) continue;  // last: the other checks say more
    auto it = file.metadata().find(key);
    if (it == file.metadata().end() && key == kEngineLayoutMetadataKey) continue;  // older
    if (it == file.metadata().end()) {
      return Bad(path, absl::StrCat("__metadata__ lacks \"", key, "\" (expected \"", value, "\")"));
    }
    if (it->second != value) {
      return Bad(path, absl::StrCat("__metadata__ \"", key, "\" is \"", it->second,
                                    "\" but the index says \"", value, "\""));
    }
  }
  for (const ShardedCheckpointTensor& t : index.tensors) {
    const SafetensorsEntry* e = file.Find(t.name);
    if (e == nullptr) {
      return Bad(path, absl::StrCat("tensor ", t.name, " of the index is missing"));
    }
    if (e->dtype != t.dtype) {
      return Bad(path, absl::StrCat("tensor ", t.name, " is ", SafetensorsCode(e->dtype),
                                    " but the index says ", SafetensorsCode(t.dtype)));
    }
    SDRT_ASSIGN_OR_RETURN(const IntVector local,
                          ComputeLocalShape(t.shape, *index.mesh, t.placements, rank));
    if (e->shape != local) {
      return Bad(path, absl::StrCat("tensor ", t.name, " has shape ", ShapeToString(e->shape),
                                    " but rank ", rank, " of global shape ", ShapeToString(t.shape),
                                    " with ", PlacementsToString(t.placements), " on mesh ",
                                    internal::MeshShapeString(*index.mesh), " holds ",
                                    ShapeToString(local)));
    }
  }
  if (file.entries().size() != index.tensors.size()) {
    const auto by_name = index.ByName();
    for (const SafetensorsEntry& e : file.entries()) {
      if (!by_name.contains(e.name)) {
        return Bad(path, absl::StrCat("tensor ", e.name, " is not in the index"));
      }
    }
  }
  if (index.format_version < internal::kPieceHashesFormatVersion) return std::vector<uint64_t>();
  for (absl::string_view key : {internal::kMetaIndexHash, internal::kMetaPieceHashes}) {
    if (file.metadata().find(std::string(key)) == file.metadata().end()) {
      return Bad(path, absl::StrCat("__metadata__ lacks \"", key, "\", which a format ",
                                    index.format_version, " rank file holds"));
    }
  }
  const std::string& written_with = file.metadata().at(std::string(internal::kMetaIndexHash));
  if (written_with != expected.at(std::string(internal::kMetaIndexHash))) {
    return Bad(
        path, absl::StrCat("written with another index: its __metadata__ \"",
                           internal::kMetaIndexHash, "\" is \"", written_with, "\" but ", index.dir,
                           "/", kShardedCheckpointIndexName, " hashes to ", FormatXxh64(index_hash),
                           " (index.json was edited, or the rank file is from another "
                           "checkpoint)"));
  }
  return internal::ParsePieceHashes(file.metadata().at(std::string(internal::kMetaPieceHashes)),
                                    index.tensors.size(), path);
}

}  // namespace

std::string RankFileName(int64_t rank, int64_t world_size) {
  return absl::StrFormat("rank-%05d-of-%05d.safetensors", rank, world_size);
}

absl::StatusOr<uint64_t> TensorXxh64(const Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TensorXxh64: the tensor must be defined and on the CPU, got ",
                     tensor.defined() ? tensor.ToString() : "an undefined tensor"));
  }
  SDRT_ASSIGN_OR_RETURN(const Tensor contiguous, tensor.Contiguous());
  const void* data = contiguous.nbytes() > 0 ? contiguous.data_ptr() : "";
  return static_cast<uint64_t>(XXH64(data, static_cast<size_t>(contiguous.nbytes()), 0));
}

std::string FormatXxh64(uint64_t hash) { return absl::StrFormat("%016x", hash); }

std::string ShardedCheckpointIndex::RankFilePath(int64_t rank) const {
  return absl::StrCat(dir, "/", files[static_cast<size_t>(rank)]);
}

const ShardedCheckpointTensor* ShardedCheckpointIndex::Find(absl::string_view name) const {
  for (const ShardedCheckpointTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

absl::flat_hash_map<absl::string_view, const ShardedCheckpointTensor*>
ShardedCheckpointIndex::ByName() const {
  absl::flat_hash_map<absl::string_view, const ShardedCheckpointTensor*> out;
  out.reserve(tensors.size());
  for (const ShardedCheckpointTensor& t : tensors) out.emplace(t.name, &t);
  return out;
}

std::vector<SafetensorsTensorSpec> ShardedCheckpointIndex::TensorSpecs() const {
  std::vector<SafetensorsTensorSpec> specs;
  specs.reserve(tensors.size());
  for (const ShardedCheckpointTensor& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  return specs;
}

Map RankShards::ToStateDict() const {
  Map out;
  for (const auto& [name, dtensor] : tensors) out.Set(name, Value(dtensor));
  return out;
}

absl::StatusOr<ShardedCheckpointIndex> ReadShardedCheckpointIndex(
    const std::string& dir, const ReadShardedCheckpointOptions& options) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": cannot open the sharded checkpoint folder: ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": not a folder (a sharded checkpoint is a folder)"));
  }
  const std::string path = absl::StrCat(dir, "/", kShardedCheckpointIndexName);
  absl::StatusOr<std::string> text = internal::ReadBoundedFile(path, internal::kMaxJsonFileBytes);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": missing or unreadable (", text.status().message(), "); not a sharded checkpoint"));
  }
  SDRT_ASSIGN_OR_RETURN(ShardedCheckpointIndex index, internal::ParseIndex(*text, path, dir));
  for (int64_t r = 0; r < index.world_size; ++r) {
    const std::string rank_path = index.RankFilePath(r);
    struct stat rank_st;
    if (stat(rank_path.c_str(), &rank_st) != 0) {
      return Bad(rank_path, absl::StrCat("rank file ", r, " of ", index.world_size, " is missing (",
                                         std::strerror(errno), ")"));
    }
    if (!S_ISREG(rank_st.st_mode)) {
      return Bad(rank_path, absl::StrCat("rank file ", r, " is not a regular file"));
    }
  }
  if (options.check_rank_files) {
    SDRT_ASSIGN_OR_RETURN(const uint64_t index_hash, internal::IndexXxh64(index));
    for (int64_t r = 0; r < index.world_size; ++r) {
      absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(index.RankFilePath(r));
      if (!file.ok()) return absl::InvalidArgumentError(file.status().message());
      SDRT_RETURN_IF_ERROR(CheckRankFileOf(index, index_hash, r, *file).status());
    }
  }
  return index;
}

absl::Status CheckRankFile(const ShardedCheckpointIndex& index, int64_t rank,
                           const SafetensorsFile& file) {
  SDRT_ASSIGN_OR_RETURN(const uint64_t index_hash, internal::IndexXxh64(index));
  return CheckRankFileOf(index, index_hash, rank, file).status();
}

absl::StatusOr<RankShards> LoadRankShards(const std::string& dir, int64_t rank) {
  ReadShardedCheckpointOptions options;
  options.check_rank_files = false;
  RankShards out;
  SDRT_ASSIGN_OR_RETURN(out.index, ReadShardedCheckpointIndex(dir, options));
  if (rank < 0 || rank >= out.index.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": rank ", rank, " is not in [0, ", out.index.world_size, ")"));
  }
  out.rank = rank;
  const std::string path = out.index.RankFilePath(rank);
  // A truncated, garbled or foreign rank file is bad input, whatever the reader's code.
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  if (!file.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("rank file ", rank, " of ",
                                                   out.index.world_size, ": ",
                                                   file.status().message()));
  }
  SDRT_ASSIGN_OR_RETURN(const uint64_t index_hash, internal::IndexXxh64(out.index));
  SDRT_ASSIGN_OR_RETURN(const std::vector<uint64_t> pieces,
                        CheckRankFileOf(out.index, index_hash, rank, *file));
  for (size_t i = 0; i < out.index.tensors.size(); ++i) {
    const ShardedCheckpointTensor& t = out.index.tensors[i];
    absl::StatusOr<Tensor> local = file->Get(t.name);
    if (!local.ok()) {
      return absl::Status(local.status().code(),
                          absl::StrCat(path, ": tensor ", t.name, ": ", local.status().message()));
    }
    // Every piece is checked here, so that damage is named with this file: a whole tensor
    // (Replicate, or a shard dim of size 1) against the index's hash, every piece against
    // the hash its writer recorded (format 2).
    const bool whole = local->shape() == t.shape;
    if (whole || !pieces.empty()) {
      SDRT_ASSIGN_OR_RETURN(const uint64_t hash, TensorXxh64(*local));
      if (whole && hash != t.xxh64) {
        return Bad(path,
                   absl::StrCat("tensor ", t.name, " holds the whole tensor, whose bytes hash to ",
                                FormatXxh64(hash), " but index.json says ", FormatXxh64(t.xxh64),
                                " (the rank file is damaged or from another checkpoint)"));
      }
      if (!pieces.empty() && hash != pieces[i]) {
        return Bad(path, absl::StrCat("tensor ", t.name, ": its piece's bytes hash to ",
                                      FormatXxh64(hash), " but the rank file's __metadata__ \"",
                                      internal::kMetaPieceHashes, "\" records ",
                                      FormatXxh64(pieces[i]), " (the rank file is damaged)"));
      }
    }
    absl::StatusOr<DTensor> dtensor =
        DTensor::Make(*std::move(local), out.index.mesh, t.placements, t.shape);
    if (!dtensor.ok()) {
      return Bad(path, absl::StrCat("tensor ", t.name, ": ", dtensor.status().message()));
    }
    out.tensors.emplace_back(t.name, *std::move(dtensor));
  }
  return out;
}

std::string UncheckedPiecesWarning(const ShardedCheckpointIndex& index) {
  if (index.format_version >= internal::kPieceHashesFormatVersion) return "";
  return absl::StrCat(index.dir, ": format ", index.format_version,
                      " rank files carry no piece hashes: pieces that are not whole tensors are "
                      "not checked as they are read (a gather checks the full tensors)");
}

absl::Status CheckGatheredTensor(const ShardedCheckpointIndex& index,
                                 const ShardedCheckpointTensor& tensor, const Tensor& full) {
  SDRT_ASSIGN_OR_RETURN(const uint64_t hash, TensorXxh64(full));
  if (hash == tensor.xxh64) return absl::OkStatus();
  // The rank files that hold elements of the tensor; one of them is damaged (or the index).
  std::vector<std::string> holders;
  for (int64_t r = 0; r < index.world_size; ++r) {
    absl::StatusOr<IntVector> local =
        ComputeLocalShape(tensor.shape, *index.mesh, tensor.placements, r);
    if (!local.ok()) return local.status();
    int64_t numel = 1;
    for (int64_t d : *local) numel *= d;
    if (numel > 0) holders.push_back(index.RankFilePath(r));
  }
  constexpr size_t kMaxNamed = 8;
  const size_t unnamed = holders.size() > kMaxNamed ? holders.size() - kMaxNamed : 0;
  holders.resize(holders.size() - unnamed);
  std::string named = absl::StrJoin(holders, ", ");
  if (unnamed > 0) absl::StrAppend(&named, " and ", unnamed, " more");
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor ", tensor.name, ": the pieces in ", named, " gather to bytes that hash to ",
      FormatXxh64(hash), " but ", index.dir, "/", kShardedCheckpointIndexName, " says ",
      FormatXxh64(tensor.xxh64), " (one of these rank files is damaged or from another "
      "checkpoint)"));
}

}  // namespace sdrt
