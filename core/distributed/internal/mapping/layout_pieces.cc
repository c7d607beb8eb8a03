#include "sdrt/core/distributed/internal/mapping/layout_pieces.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/sharding/sharding.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<LayoutPiece>> PiecesOfLayout(const LeafLayout& l,
                                                        const std::vector<int64_t>& plain_holders,
                                                        const std::string& where) {
  std::vector<LayoutPiece> pieces;
  switch (l.kind) {
    case LeafLayout::Kind::kMesh: {
      absl::StatusOr<DeviceMesh> mesh =
          DeviceMesh::Create(l.mesh_shape, l.mesh_ranks, {}, l.mesh_device);
      if (!mesh.ok()) return Invalid(where, mesh.status().message());
      for (const Placement& p : l.placements) {
        if (p.kind() != Placement::Kind::kShard && !p.is_replicate()) {
          return Invalid(where, absl::StrCat("a tensor a rule fuses, splits or pads is laid out by "
                                             "Shard and Replicate placements only, not ",
                                             PlacementsToString(l.placements)));
        }
      }
      for (int64_t rank : mesh->ranks()) {
        absl::StatusOr<LocalShardInfo> info =
            ComputeLocalShapeAndGlobalOffset(l.shape, *mesh, l.placements, rank);
        if (!info.ok()) return Invalid(where, info.status().message());
        pieces.push_back({rank, 0, info->global_offset, info->local_shape});
      }
      break;
    }
    case LeafLayout::Kind::kBoxes: {
      std::map<int64_t, int> per_rank;
      for (const TransferBox& b : l.boxes) {
        pieces.push_back({b.rank, per_rank[b.rank]++, b.offsets, b.sizes});
      }
      break;
    }
    case LeafLayout::Kind::kPlain:
      for (int64_t rank : plain_holders) {
        pieces.push_back({rank, 0, IntVector(l.shape.size(), 0), l.shape});
      }
      break;
    case LeafLayout::Kind::kInline:
      return Invalid(where, "a value, not a tensor");
  }
  // A peer's boxes are checked here, before any arithmetic on them (the planner checks
  // them again): within the tensor on every dim.
  for (const LayoutPiece& p : pieces) {
    if (p.offsets.size() != l.shape.size() || p.sizes.size() != l.shape.size()) {
      return Invalid(where, absl::StrCat("a box on rank ", p.rank, " is not of the tensor's ",
                                         l.shape.size(), " dims"));
    }
    for (size_t d = 0; d < l.shape.size(); ++d) {
      if (l.shape[d] < 0 || p.sizes[d] < 0 || p.offsets[d] < 0 ||
          (p.sizes[d] > 0 && p.offsets[d] > l.shape[d] - p.sizes[d])) {
        return Invalid(where, absl::StrCat("a box on rank ", p.rank, " (offsets ",
                                           ShapeToString(p.offsets), " sizes ",
                                           ShapeToString(p.sizes), ") lies outside ",
                                           ShapeToString(l.shape)));
      }
    }
  }
  return pieces;
}

bool EmptyPiece(const LayoutPiece& p) {
  return std::any_of(p.sizes.begin(), p.sizes.end(), [](int64_t s) { return s <= 0; });
}

absl::StatusOr<int64_t> EqualParts(const std::vector<LayoutPiece>& pieces, int dim, int64_t size,
                                   const std::string& where) {
  std::set<std::pair<int64_t, int64_t>> ranges;
  for (const LayoutPiece& p : pieces) {
    if (!EmptyPiece(p)) ranges.emplace(p.offsets[dim], p.offsets[dim] + p.sizes[dim]);
  }
  int64_t at = 0, length = -1;
  for (const auto& [a, b] : ranges) {
    if (a != at || (length >= 0 && b - a != length)) {
      return Invalid(where, absl::StrCat("its layout does not cut dim ", dim,
                                         " into equal parts (a piece holds [", a, ", ", b, "))"));
    }
    length = b - a;
    at = b;
  }
  if (ranges.empty() || at != size) {
    return Invalid(where, absl::StrCat("its pieces do not cover dim ", dim, " (", size, ")"));
  }
  return static_cast<int64_t>(ranges.size());
}

}  // namespace sdrt::internal
