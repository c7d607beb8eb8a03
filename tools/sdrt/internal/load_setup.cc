// ShareTensorList and VerifyPieces (load_setup.h).
#include "sdrt/tools/sdrt/internal/load_setup.h"

#include <optional>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/tensor/sharding/distribute.h"

namespace sdrt::cli {

absl::StatusOr<std::vector<SafetensorsTensorSpec>> ShareTensorList(const Session& session,
                                                                   const CheckpointSource* source) {
  std::string bytes;
  if (source != nullptr) {
    nlohmann::json list = nlohmann::json::array();
    for (const CheckpointSourceTensor& e : source->tensors()) {
      list.push_back({e.name, std::string(DTypeName(e.dtype)),
                      std::vector<int64_t>(e.shape.begin(), e.shape.end())});
    }
    const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(list);
    bytes.assign(cbor.begin(), cbor.end());
  }
  absl::Status status = session.world().BroadcastBytes(&bytes, 0);
  if (!status.ok()) return status;
  std::vector<SafetensorsTensorSpec> infos;
  for (const nlohmann::json& e : nlohmann::json::from_cbor(bytes)) {
    SafetensorsTensorSpec info;
    info.name = e[0].get<std::string>();
    absl::StatusOr<DType> dtype = DTypeFromName(e[1].get<std::string>());
    if (!dtype.ok()) return dtype.status();
    info.dtype = *dtype;
    for (int64_t s : e[2].get<std::vector<int64_t>>()) info.shape.push_back(s);
    infos.push_back(std::move(info));
  }
  return infos;
}

absl::StatusOr<std::vector<std::string>> VerifyPieces(const std::string& verify_dir,
                                                      const std::string& src,
                                                      const std::string& mesh_text, int rank,
                                                      const DeviceMesh& mesh, const Map& local) {
  std::vector<std::string> wrong;
  std::optional<RankShards> expected;
  // INDIR's pieces by name: one lookup per tensor, so verifying n tensors is O(n).
  absl::flat_hash_map<std::string_view, const DTensor*> expected_by_name;
  std::optional<CheckpointSource> file;
  if (!verify_dir.empty()) {
    absl::StatusOr<RankShards> shards = LoadRankShards(verify_dir, rank);
    if (!shards.ok()) return shards.status();
    expected = *std::move(shards);
    if (expected->index.mesh->shape() != mesh.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          verify_dir, " is sharded on mesh ",
          absl::StrJoin(expected->index.mesh->shape(), "x"), " but --mesh is ", mesh_text));
    }
    expected_by_name.reserve(expected->tensors.size());
    for (const auto& [name, dtensor] : expected->tensors) expected_by_name.emplace(name, &dtensor);
  } else {
    absl::StatusOr<CheckpointSource> opened = CheckpointSource::Open(src);
    if (!opened.ok()) return opened.status();
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
    absl::StatusOr<Tensor> mine =
        (got != nullptr ? got->local() : value.as_tensor()).To(Device::CPU());
    if (!mine.ok()) return mine.status();
    Tensor want;
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
      want = expected_piece.local();
    } else {
      absl::StatusOr<Tensor> full = file->Get(local.key(i));
      if (!full.ok()) return full.status();
      if (got != nullptr) {
        absl::StatusOr<DTensor> piece =
            DistributeTensor(*full, got->mesh(), got->placements(), rank);
        if (!piece.ok()) return piece.status();
        want = piece->local();
      } else {
        want = *full;
      }
    }
    absl::StatusOr<uint64_t> a = TensorXxh64(*mine);
    absl::StatusOr<uint64_t> b = TensorXxh64(want);
    if (!a.ok()) return a.status();
    if (!b.ok()) return b.status();
    if (*a != *b || mine->shape() != want.shape()) wrong.push_back(local.key(i));
  }
  return wrong;
}

}  // namespace sdrt::cli
