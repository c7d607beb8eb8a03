// EncodeOutline, DecodeOutline and CheckLoaded (load_setup.h).
#include "sdrt/tools/sdrt/internal/load_setup.h"

#include <sys/mman.h>
#include <unistd.h>

#include <optional>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// Gives back this process's pages of `tensor` when it is a view of a read-only file mapping
// (SafetensorsFile's, kMappedFile), so that checking every piece against SRC does not keep
// each byte of SRC it compared in the rank's memory (its peak was the pieces' twice and
// more); the page cache keeps the bytes. Nothing for any other storage.
void ReleaseMappedPages(const Tensor& tensor) {
  const std::shared_ptr<Storage>& storage = tensor.storage();
  if (storage == nullptr || storage->kind() != StorageKind::kMappedFile || tensor.nbytes() == 0) {
    return;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(tensor.data_ptr());
  const uintptr_t end = begin + static_cast<uintptr_t>(tensor.nbytes());
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
  if (last > first) {
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // a hint only
  }
}

// Whether `got` (on any device) holds `want`'s bytes and shape, by xxh64.
absl::StatusOr<bool> SameBytes(const Tensor& got, const Tensor& want) {
  SDRT_ASSIGN_OR_RETURN(const Tensor mine, got.To(Device::CPU()));
  SDRT_ASSIGN_OR_RETURN(const uint64_t a, TensorXxh64(mine));
  SDRT_ASSIGN_OR_RETURN(const uint64_t b, TensorXxh64(want));
  return a == b && mine.shape() == want.shape();
}

// Whether `value` holds rank `rank`'s part of the full tensor `full`: a DTensor its piece
// (DistributeTensor's), a plain tensor the whole.
absl::StatusOr<bool> HoldsItsPart(const Value& value, const Tensor& full, int rank) {
  if (value.kind() != ValueKind::kDTensor) return SameBytes(value.as_tensor(), full);
  const DTensor& got = value.as_dtensor();
  SDRT_ASSIGN_OR_RETURN(const DTensor want,
                        DistributeTensor(full, got.mesh(), got.placements(), rank));
  return SameBytes(got.local(), want.local());
}

// Checks rank `rank`'s loaded pieces in `local` by xxh64 against `verify_dir`'s rank file
// (a sharded checkpoint; `mesh_text` is --mesh, for the message) or, when it is empty,
// against DistributeTensor of SRC's full tensors; returns the names that differ.
absl::StatusOr<std::vector<std::string>> VerifyPieces(const std::string& verify_dir,
                                                      const std::string& src,
                                                      const std::string& mesh_text, int rank,
                                                      const DeviceMesh* mesh, const Map& local) {
  std::vector<std::string> wrong;
  std::optional<RankShards> expected;
  // INDIR's pieces by name: one lookup per tensor, so verifying n tensors is O(n).
  absl::flat_hash_map<std::string_view, const DTensor*> expected_by_name;
  std::optional<CheckpointSource> file;
  if (!verify_dir.empty()) {
    absl::StatusOr<RankShards> shards = LoadRankShards(verify_dir, rank);
    if (!shards.ok()) return shards.status();
    expected = *std::move(shards);
    if (mesh == nullptr || expected->index.mesh->shape() != mesh->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          verify_dir, " is sharded on mesh ", absl::StrJoin(expected->index.mesh->shape(), "x"),
          " but --mesh is ", mesh_text));
    }
    expected_by_name.reserve(expected->tensors.size());
    for (const auto& [name, dtensor] : expected->tensors) expected_by_name.emplace(name, &dtensor);
  } else {
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(src);
    if (!opened.ok()) return InputError(opened.status());
    file = *std::move(opened);
  }
  for (size_t i = 0; i < local.size(); ++i) {
    // A DTensor, or the full tensor for a 0-dim one (BroadcastStateDict replaces 0-dim
    // leaves by the checkpoint's value, as PyTorch).
    const Value& value = local.value(i);
    const DTensor* got = value.kind() == ValueKind::kDTensor ? &value.as_dtensor() : nullptr;
    if (got == nullptr && value.kind() != ValueKind::kTensor) {
      return absl::InternalError(absl::StrCat(local.key(i), ": the load left no tensor"));
    }
    bool same = false;
    if (expected.has_value()) {
      const auto it = expected_by_name.find(local.key(i));
      if (it == expected_by_name.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(verify_dir, " has no tensor ", local.key(i)));
      }
      const DTensor& expected_piece = *it->second;
      if (got != nullptr && expected_piece.placements() != got->placements()) {
        return absl::InvalidArgumentError(
            absl::StrCat(local.key(i), ": ", verify_dir, " holds it as ",
                         PlacementsToString(expected_piece.placements()), ", the plan gives ",
                         PlacementsToString(got->placements())));
      }
      SDRT_ASSIGN_OR_RETURN(same, SameBytes(got != nullptr ? got->local() : value.as_tensor(),
                                            expected_piece.local()));
    } else {
      absl::StatusOr<Tensor> full = file->Get(local.key(i));
      if (!full.ok()) return full.status();
      SDRT_ASSIGN_OR_RETURN(same, HoldsItsPart(value, *full, rank));
      ReleaseMappedPages(*full);
    }
    if (!same) wrong.push_back(local.key(i));
  }
  return wrong;
}

// Every tensor gathered to rank 0 and compared there by xxh64 with SRC as rank 0 opened it:
// a sharded folder's index hashes, else the full tensors of the file or folder. The names
// that differ (on rank 0; empty elsewhere).
absl::StatusOr<std::vector<std::string>> CheckGathered(const LoadCheck& check,
                                                       const Map& local) {
  GatherOptions options;
  options.comm = check.comm;
  options.ranks_only = {0};
  options.cpu_offload = true;
  options.bucket_bytes = check.bucket_bytes;
  SDRT_ASSIGN_OR_RETURN(const Map full, GatherStateDict(local, options));
  std::vector<std::string> wrong;
  if (check.rank != 0) return wrong;
  const CheckpointSource& source = *check.source;
  const ShardedCheckpointIndex* index = source.sharded_index();
  absl::flat_hash_map<absl::string_view, const ShardedCheckpointTensor*> indexed;
  if (index != nullptr) indexed = index->ByName();  // one lookup per tensor
  for (size_t i = 0; i < full.size(); ++i) {
    const Value& v = full.value(i);
    const std::string& name = full.key(i);
    if (v.kind() != ValueKind::kTensor) {
      wrong.push_back(name);
      continue;
    }
    if (index != nullptr) {
      const auto t = indexed.find(name);
      if (t == indexed.end() || !CheckGatheredTensor(*index, *t->second, v.as_tensor()).ok()) {
        wrong.push_back(name);
      }
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(const Tensor want, source.Get(name));
    SDRT_ASSIGN_OR_RETURN(const bool same, SameBytes(v.as_tensor(), want));
    if (!same) wrong.push_back(name);
    ReleaseMappedPages(want);
  }
  return wrong;
}

// LoadCheck::whole_on_each_rank: the names of this rank's pieces that differ from the
// tensors it holds, loaded whole again and checked against the sharded folder's index.
absl::StatusOr<std::vector<std::string>> CheckWholeOnEachRank(const LoadCheck& check,
                                                              const Map& local) {
  const ShardedCheckpointIndex& index = *check.source->sharded_index();
  const auto indexed = index.ByName();
  Map whole;  // a plain meta tensor per DTensor piece: the reshard makes it the full tensor
  whole.Reserve(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    const Value& v = local.value(i);
    if (v.kind() != ValueKind::kDTensor) continue;
    SDRT_ASSIGN_OR_RETURN(Tensor meta,
                          Tensor::Meta(v.as_dtensor().global_shape(), v.as_dtensor().dtype()));
    whole.Set(local.key(i), Value(std::move(meta)));
  }
  LoadOptions options;
  options.comm = check.comm;
  options.read = ReadMode::kAll;
  options.bucket_bytes = check.bucket_bytes;
  SDRT_RETURN_IF_ERROR(LoadStateDict(*check.source, whole, options).status());
  std::vector<std::string> wrong;
  for (size_t i = 0; i < local.size(); ++i) {
    const std::string& name = local.key(i);
    const Value& v = local.value(i);
    const auto t = indexed.find(name);
    const Value* full = v.kind() == ValueKind::kDTensor ? whole.Find(name) : &v;
    if (t == indexed.end() || full == nullptr || full->kind() != ValueKind::kTensor ||
        !CheckGatheredTensor(index, *t->second, full->as_tensor()).ok()) {
      wrong.push_back(name);
      continue;
    }
    if (v.kind() != ValueKind::kDTensor) continue;
    SDRT_ASSIGN_OR_RETURN(const bool same, HoldsItsPart(v, full->as_tensor(), check.rank));
    if (!same) wrong.push_back(name);
  }
  return wrong;
}

}  // namespace

std::string EncodeOutline(const CheckpointSource& source) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const CheckpointSourceTensor& e : source.tensors()) {
    tensors.push_back({e.name, std::string(DTypeName(e.dtype)),
                       std::vector<int64_t>(e.shape.begin(), e.shape.end())});
  }
  nlohmann::json outline = {{"tensors", std::move(tensors)},
                            {"engine_layout", RecordedEngineLayout(source.metadata())}};
  if (const ShardedCheckpointIndex* index = source.sharded_index(); index != nullptr) {
    outline["sharded"] = {index->world_size, absl::StrJoin(index->mesh->shape(), "x"), index->plan};
  }
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(outline);
  return std::string(cbor.begin(), cbor.end());
}

absl::StatusOr<SourceOutline> DecodeOutline(const std::string& bytes) {
  const nlohmann::json outline =
      nlohmann::json::from_cbor(bytes, /*strict=*/true, /*allow_exceptions=*/false);
  if (outline.is_discarded() || !outline.contains("tensors")) {
    return absl::InvalidArgumentError("rank 0 sent a malformed tensor list");
  }
  SourceOutline out;
  for (const nlohmann::json& e : outline["tensors"]) {
    SafetensorsTensorSpec info;
    info.name = e[0].get<std::string>();
    SDRT_ASSIGN_OR_RETURN(info.dtype, DTypeFromName(e[1].get<std::string>()));
    for (int64_t s : e[2].get<std::vector<int64_t>>()) info.shape.push_back(s);
    out.tensors.push_back(std::move(info));
  }
  if (outline.contains("engine_layout") && outline["engine_layout"].is_string()) {
    out.engine_layout = outline["engine_layout"].get<std::string>();
  }
  if (outline.contains("sharded")) {
    out.sharded = true;
    out.sharded_ranks = outline["sharded"][0].get<int64_t>();
    out.sharded_mesh = outline["sharded"][1].get<std::string>();
    out.sharded_plan = outline["sharded"][2].get<std::string>();
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CheckLoaded(const LoadCheck& check, const Map& local) {
  if (check.gathered) return CheckGathered(check, local);
  if (check.whole_on_each_rank) return CheckWholeOnEachRank(check, local);
  return VerifyPieces(check.verify_dir, check.src, check.mesh_text, check.rank, check.mesh, local);
}

}  // namespace sdrt::cli
