#include "sdrt/core/distributed/internal/reshard_pieces.h"

#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

std::string Where(const ReshardTensor& tensor, bool source) {
  return absl::StrCat("reshard of tensor '", tensor.name, "' (", DTypeName(tensor.dtype), " ",
                      ShapeToString(tensor.shape), "), ", source ? "source" : "destination");
}

absl::Status Invalid(const ReshardTensor& tensor, bool source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(tensor, source), ": ", what));
}

absl::StatusOr<std::vector<ReshardPiece>> MeshPieces(const ReshardTensor& tensor, bool source) {
  const ReshardLayout& layout = source ? tensor.source : tensor.destination;
  const DeviceMesh& mesh = *layout.mesh;
  if (static_cast<int>(layout.placements.size()) != mesh.ndim()) {
    return Invalid(
        tensor, source,
        absl::StrCat(layout.placements.size(), " placements for a mesh of ", mesh.ndim(), " dims"));
  }
  for (const Placement& p : layout.placements) {
    if (p.is_partial()) {
      if (!source) return Invalid(tensor, source, "a destination cannot be Partial");
      return absl::UnimplementedError(absl::StrCat(
          Where(tensor, source), ": Partial placements ", PlacementsToString(layout.placements),
          " are not resharded yet (the reduction on the receiving side is phase 2 of issue 14)"));
    }
    if (p.kind() == Placement::Kind::kStridedShard && p.dim() >= 0 &&
        p.dim() < static_cast<int>(tensor.shape.size()) &&
        tensor.shape[p.dim()] > kMaxStridedIndices / mesh.num_ranks()) {
      return Invalid(
          tensor, source,
          absl::StrCat(p.ToString(), " over ", mesh.num_ranks(), " ranks lists dim ", p.dim(),
                       " of ", tensor.shape[p.dim()], " indices per rank; at most ",
                       kMaxStridedIndices, " indices in all are supported"));
    }
  }
  std::vector<ReshardPiece> pieces;
  pieces.reserve(mesh.ranks().size());
  for (int64_t rank : mesh.ranks()) {
    if (rank < 0) return Invalid(tensor, source, absl::StrCat("negative rank ", rank));
    absl::StatusOr<LocalShardInfo> info =
        ComputeLocalShapeAndGlobalOffset(tensor.shape, mesh, layout.placements, rank);
    if (!info.ok()) return Invalid(tensor, source, info.status().message());
    ReshardPiece piece;
    piece.rank = rank;
    piece.local_shape = info->local_shape;
    piece.runs = OwnedRuns(*info);
    pieces.push_back(std::move(piece));
  }
  SDRT_RETURN_IF_ERROR(CheckShardingCutsWholeBytes(tensor.name, tensor.dtype, tensor.shape, mesh,
                                                   layout.placements));
  return pieces;
}

absl::StatusOr<std::vector<ReshardPiece>> BoxPieces(const ReshardTensor& tensor, bool source) {
  const std::vector<ReshardBox>& boxes = (source ? tensor.source : tensor.destination).boxes;
  if (static_cast<int64_t>(boxes.size()) > kMaxReshardBoxes) {
    return Invalid(tensor, source,
                   absl::StrCat(boxes.size(), " boxes; at most ", kMaxReshardBoxes));
  }
  const size_t ndim = tensor.shape.size();
  std::map<int64_t, int> per_rank;
  std::vector<ReshardPiece> pieces;
  pieces.reserve(boxes.size());
  for (size_t b = 0; b < boxes.size(); ++b) {
    const ReshardBox& box = boxes[b];
    const std::string which =
        absl::StrCat("box ", b, " (offsets ", ShapeToString(box.offsets), " sizes ",
                     ShapeToString(box.sizes), " on rank ", box.rank, ")");
    if (box.rank < 0) return Invalid(tensor, source, absl::StrCat(which, ": negative rank"));
    if (box.offsets.size() != ndim || box.sizes.size() != ndim) {
      return Invalid(tensor, source, absl::StrCat(which, ": not of the tensor's ", ndim, " dims"));
    }
    bool empty = false;
    for (size_t d = 0; d < ndim; ++d) {
      if (box.offsets[d] < 0 || box.sizes[d] < 0) {
        return Invalid(tensor, source, absl::StrCat(which, ": negative offset or size"));
      }
      empty = empty || box.sizes[d] == 0;
    }
    for (size_t d = 0; d < ndim && !empty; ++d) {
      if (box.offsets[d] > tensor.shape[d] - box.sizes[d]) {
        return Invalid(tensor, source, absl::StrCat(which, ": outside the tensor on dim ", d));
      }
    }
    ReshardPiece piece;
    piece.rank = box.rank;
    piece.local = per_rank[box.rank]++;
    piece.local_shape = box.sizes;
    piece.runs = empty ? ShardRuns(ndim) : BoxRuns(box.offsets, box.sizes);
    if (!empty) {
      SDRT_RETURN_IF_ERROR(
          CheckBoxCutsWholeBytes(tensor.name, tensor.dtype, tensor.shape, box.offsets, box.sizes));
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

}  // namespace

absl::StatusOr<std::vector<ReshardPiece>> LayoutPieces(const ReshardTensor& tensor, bool source) {
  if (static_cast<int>(tensor.shape.size()) > kMaxReshardDims) {
    return Invalid(tensor, source,
                   absl::StrCat(tensor.shape.size(), " dims; at most ", kMaxReshardDims));
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(tensor.shape);
  if (!numel.ok()) return Invalid(tensor, source, numel.status().message());
  absl::StatusOr<int64_t> bytes = BytesForElements(tensor.dtype, *numel);
  if (!bytes.ok()) return Invalid(tensor, source, bytes.status().message());
  const ReshardLayout& layout = source ? tensor.source : tensor.destination;
  if (layout.mesh != nullptr && !layout.boxes.empty()) {
    return Invalid(tensor, source, "a layout is a mesh or boxes, not both");
  }
  if (layout.mesh != nullptr) return MeshPieces(tensor, source);
  return BoxPieces(tensor, source);
}

}  // namespace sdrt::internal
