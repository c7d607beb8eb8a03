#include "sdrt/core/distributed/internal/engine/pieces.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/reduce.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

std::string Where(const TransferTensor& tensor, bool source) {
  return absl::StrCat("reshard of tensor '", tensor.name, "' (", DTypeName(tensor.dtype), " ",
                      ShapeToString(tensor.shape), "), ", source ? "source" : "destination");
}

absl::Status Invalid(const TransferTensor& tensor, bool source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Where(tensor, source), ": ", what));
}

// The pieces of a mesh side but their boxes' runs (PieceCache::Pattern), `partial_dims`
// its Partial mesh dims.
absl::StatusOr<PieceCache::Pattern> MeshPattern(const TransferTensor& tensor, bool source,
                                                const std::vector<int>& partial_dims,
                                                const std::vector<int64_t>& node_of_rank) {
  const TransferLayout& layout = source ? tensor.source : tensor.destination;
  const DeviceMesh& mesh = *layout.mesh;
  std::vector<OutlinePiece> pieces;
  pieces.reserve(mesh.ranks().size());
  PieceCache::Pattern pattern;
  // A rank's runs follow from its coordinates on the sharded mesh dims alone (Replicate and
  // Partial leave the shape alone): the ranks that agree on those share a box, made for
  // the first of them. Per row-major index of those coordinates, its box, or -1.
  std::vector<int> box_of(mesh.ranks().size(), -1);
  IntVector coordinate(static_cast<size_t>(mesh.ndim()));
  for (size_t m = 0; m < mesh.ranks().size(); ++m) {
    const int64_t rank = mesh.ranks()[m];
    if (rank < 0 || rank >= kMaxMeshRanks) {
      return Invalid(tensor, source,
                     absl::StrCat("rank ", rank, " outside [0, ", kMaxMeshRanks, ")"));
    }
    int64_t rest = static_cast<int64_t>(m);  // mesh order is row-major over the coordinates
    for (int d = mesh.ndim() - 1; d >= 0; --d) {
      coordinate[d] = rest % mesh.size(d);
      rest /= mesh.size(d);
    }
    size_t sharded = 0;
    for (int d = 0; d < mesh.ndim(); ++d) {
      const Placement::Kind kind = layout.placements[d].kind();
      if (kind == Placement::Kind::kShard || kind == Placement::Kind::kStridedShard) {
        sharded = sharded * static_cast<size_t>(mesh.size(d)) + static_cast<size_t>(coordinate[d]);
      }
    }
    OutlinePiece piece;
    piece.rank = rank;
    if (box_of[sharded] < 0) {
      box_of[sharded] = static_cast<int>(pattern.box_ranks.size());
      pattern.box_ranks.push_back(rank);
    }
    piece.box = box_of[sharded];
    if (source) {
      for (int i : partial_dims) {
        piece.contribution = piece.contribution * mesh.size(i) + coordinate[i];
      }
    } else if (!partial_dims.empty()) {
      // DistributeTensor's rule: the reduction's identity off coordinate 0 of a sum or
      // product mesh dim; the value itself for avg, min and max.
      absl::StatusOr<PartialIdentity> identity =
          PartialIdentityOf(mesh, layout.placements, coordinate);
      if (!identity.ok()) return Invalid(tensor, source, identity.status().message());
      piece.identity = *identity != PartialIdentity::kNone;
    }
    pieces.push_back(piece);
  }
  if (!node_of_rank.empty()) {  // apart: no (box, node) twice among the pieces taking any
    std::vector<std::pair<int, int64_t>> box_node;
    for (const OutlinePiece& piece : pieces) {
      if (piece.identity) continue;
      const bool known = piece.rank < static_cast<int64_t>(node_of_rank.size());
      box_node.emplace_back(
          piece.box, known ? node_of_rank[static_cast<size_t>(piece.rank)] : -1 - piece.rank);
    }
    std::sort(box_node.begin(), box_node.end());
    pattern.replicas_apart = std::adjacent_find(box_node.begin(), box_node.end()) == box_node.end();
  }
  pattern.pieces = std::make_shared<const std::vector<OutlinePiece>>(std::move(pieces));
  return pattern;
}

// The pieces of a mesh layout; for a Partial source also the contributions and their op,
// for a Partial destination the pieces off coordinate 0 marked `identity`.
absl::StatusOr<SideOutline> MeshPieces(const TransferTensor& tensor, bool source, PieceCache& cache,
                                       TransferLayoutPlan& plan) {
  const TransferLayout& layout = source ? tensor.source : tensor.destination;
  const DeviceMesh& mesh = *layout.mesh;
  if (static_cast<int>(layout.placements.size()) != mesh.ndim()) {
    return Invalid(
        tensor, source,
        absl::StrCat(layout.placements.size(), " placements for a mesh of ", mesh.ndim(), " dims"));
  }
  std::vector<int> partial_dims;
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& p = layout.placements[i];
    if (p.is_partial()) {
      if (!source) {
        partial_dims.push_back(i);  // coordinate 0 takes the value, the others nothing
        continue;
      }
      if (!partial_dims.empty() && p != layout.placements[partial_dims[0]]) {
        return absl::UnimplementedError(
            absl::StrCat(Where(tensor, source), ": Partial mesh dims with different reduce ops ",
                         PlacementsToString(layout.placements), " are not resharded"));
      }
      partial_dims.push_back(i);
      plan.contributions *= mesh.size(i);
      plan.reduce_op = p.reduce_op();
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
  if (source && !partial_dims.empty() && !CanReduce(tensor.dtype, plan.reduce_op)) {
    return Invalid(tensor, source,
                   absl::StrCat("Partial contributions of ", DTypeName(tensor.dtype),
                                " cannot be reduced (", PlacementsToString(layout.placements),
                                plan.reduce_op == ReduceOp::kAvg
                                    ? "; avg divides, for floating dtypes only, as PyTorch's)"
                                    : ")"));
  }
  // The ranks' boxes, contributions and identities follow from the mesh and the kinds of
  // its placements alone: made once per plan for the sides that share those.
  std::string key;
  PutU64(&key, reinterpret_cast<uintptr_t>(&mesh));
  PutU64(&key, source ? 1 : 0);
  for (const Placement& p : layout.placements) {
    const bool sharded =
        p.kind() == Placement::Kind::kShard || p.kind() == Placement::Kind::kStridedShard;
    PutU64(&key, p.is_partial() ? 2 + static_cast<uint64_t>(p.reduce_op()) : sharded ? 1 : 0);
  }
  const PieceCache::Pattern* pattern = cache.FindPattern(key);
  if (pattern == nullptr) {
    SDRT_ASSIGN_OR_RETURN(PieceCache::Pattern made,
                          MeshPattern(tensor, source, partial_dims, cache.node_of_rank()));
    pattern = &cache.AddPattern(std::move(key), std::move(made));
  }
  SideOutline side;
  side.shared_pieces = pattern->pieces;
  side.replicas_apart = pattern->replicas_apart;
  side.boxes.reserve(pattern->box_ranks.size());
  for (int64_t rank : pattern->box_ranks) {
    absl::StatusOr<LocalShardInfo> info =
        ComputeLocalShapeAndGlobalOffset(tensor.shape, mesh, layout.placements, rank);
    if (!info.ok()) return Invalid(tensor, source, info.status().message());
    side.boxes.push_back({info->local_shape, OwnedRuns(*info)});
  }
  SDRT_RETURN_IF_ERROR(CheckShardingCutsWholeBytes(tensor.name, tensor.dtype, tensor.shape, mesh,
                                                   layout.placements));
  return side;
}

absl::StatusOr<SideOutline> BoxPieces(const TransferTensor& tensor, bool source) {
  const std::vector<TransferBox>& boxes = (source ? tensor.source : tensor.destination).boxes;
  if (static_cast<int64_t>(boxes.size()) > kMaxTransferBoxes) {
    return Invalid(tensor, source,
                   absl::StrCat(boxes.size(), " boxes; at most ", kMaxTransferBoxes));
  }
  const size_t ndim = tensor.shape.size();
  std::map<int64_t, int> per_rank;
  std::vector<OutlinePiece> pieces;
  pieces.reserve(boxes.size());
  SideOutline side;
  side.boxes.reserve(boxes.size());
  for (size_t b = 0; b < boxes.size(); ++b) {
    const TransferBox& box = boxes[b];
    const std::string which =
        absl::StrCat("box ", b, " (offsets ", ShapeToString(box.offsets), " sizes ",
                     ShapeToString(box.sizes), " on rank ", box.rank, ")");
    if (box.rank < 0 || box.rank >= kMaxMeshRanks) {
      return Invalid(tensor, source,
                     absl::StrCat(which, ": rank outside [0, ", kMaxMeshRanks, ")"));
    }
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
    OutlinePiece piece;
    piece.rank = box.rank;
    piece.box = static_cast<int>(b);
    piece.local = per_rank[box.rank]++;
    side.boxes.push_back({box.sizes, empty ? ShardRuns(ndim) : BoxRuns(box.offsets, box.sizes)});
    if (!empty) {
      SDRT_RETURN_IF_ERROR(
          CheckBoxCutsWholeBytes(tensor.name, tensor.dtype, tensor.shape, box.offsets, box.sizes));
    }
    pieces.push_back(piece);
  }
  side.shared_pieces = std::make_shared<const std::vector<OutlinePiece>>(std::move(pieces));
  return side;
}

absl::StatusOr<SideOutline> SidePieces(const TransferTensor& tensor, bool source, PieceCache& cache,
                                       TransferLayoutPlan& plan) {
  if (static_cast<int>(tensor.shape.size()) > kMaxTransferDims) {
    return Invalid(tensor, source,
                   absl::StrCat(tensor.shape.size(), " dims; at most ", kMaxTransferDims));
  }
  absl::StatusOr<int64_t> numel = CheckedNumel(tensor.shape);
  if (!numel.ok()) return Invalid(tensor, source, numel.status().message());
  absl::StatusOr<int64_t> bytes = BytesForElements(tensor.dtype, *numel);
  if (!bytes.ok()) return Invalid(tensor, source, bytes.status().message());
  const TransferLayout& layout = source ? tensor.source : tensor.destination;
  if (layout.mesh != nullptr && !layout.boxes.empty()) {
    return Invalid(tensor, source, "a layout is a mesh or boxes, not both");
  }
  if (layout.mesh != nullptr) return MeshPieces(tensor, source, cache, plan);
  return BoxPieces(tensor, source);
}

}  // namespace

void PieceCache::Add(const std::string& key, Side side) {
  const int64_t size = static_cast<int64_t>(side.outline->size());
  if (!sides_.try_emplace(key, std::move(side)).second) return;
  order_.push_back(key);
  pieces_ += size;
  while (pieces_ > max_pieces_ && order_.size() > 1) {
    const auto oldest = sides_.find(order_.front());
    pieces_ -= static_cast<int64_t>(oldest->second.outline->size());
    sides_.erase(oldest);
    order_.pop_front();
  }
}

const PieceCache::Pattern& PieceCache::AddPattern(std::string key, Pattern pattern) {
  pattern_pieces_ += static_cast<int64_t>(pattern.pieces->size());
  if (pattern_pieces_ > max_pieces_) {  // dropped all at once: a plan has few
    patterns_.clear();
    pattern_pieces_ = static_cast<int64_t>(pattern.pieces->size());
  }
  return patterns_.insert_or_assign(std::move(key), std::move(pattern)).first->second;
}

PieceList PieceCache::Whole(const std::string& key, const SideOutline& outline) {
  const auto made = [&outline] {
    std::vector<TransferPiece> pieces;
    pieces.reserve(outline.size());
    for (size_t p = 0; p < outline.size(); ++p) pieces.push_back(outline.Piece(p));
    return PieceList(std::move(pieces));
  };
  const auto it = sides_.find(key);
  if (it == sides_.end() || it->second.outline.get() != &outline) return made();
  if (it->second.whole.size() != outline.size()) it->second.whole = made();
  return it->second.whole;
}

absl::Status LayoutPieces(const TransferTensor& tensor, const std::string& source_key,
                          const std::string& destination_key, PieceCache& cache,
                          TransferLayoutPlan& plan, LayoutOutlines& outlines) {
  for (const bool source : {true, false}) {
    const std::string& key = source ? source_key : destination_key;
    std::shared_ptr<const SideOutline>& side = source ? outlines.source : outlines.destination;
    if (const PieceCache::Side* made = cache.Find(key)) {
      side = made->outline;
      if (source) {
        plan.contributions = made->contributions;
        plan.reduce_op = made->reduce_op;
      }
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(SideOutline outline, SidePieces(tensor, source, cache, plan));
    side = std::make_shared<const SideOutline>(std::move(outline));
    cache.Add(key, {side, source ? plan.contributions : 1, source ? plan.reduce_op : ReduceOp::kSum,
                    PieceList()});
  }
  return absl::OkStatus();
}

void KeepPieces(int64_t rank, const LayoutOutlines& sides, const std::string& source_key,
                const std::string& destination_key, PieceCache& cache, TransferLayoutPlan& tp) {
  const SideOutline& source = *sides.source;
  const SideOutline& destination = *sides.destination;
  const auto whole = [&] {
    tp.source = cache.Whole(source_key, source);
    tp.destination = cache.Whole(destination_key, destination);
  };
  if (rank < 0 || tp.collective != Collective::kNone) return whole();
  // 1: a piece the rank uses.
  std::vector<int> source_index(source.size()), destination_index(destination.size());
  for (size_t i = 0; i < source.size(); ++i) source_index[i] = source[i].rank == rank;
  for (size_t i = 0; i < destination.size(); ++i) {
    destination_index[i] = destination[i].rank == rank;
  }
  for (const TransferMessage& message : tp.messages) {
    for (const TransferMove& move : message.moves) {
      (move.forward ? destination_index : source_index)[static_cast<size_t>(move.source)] = 1;
      destination_index[static_cast<size_t>(move.destination)] = 1;
    }
  }
  const auto all_used = [](const std::vector<int>& used) {
    return std::all_of(used.begin(), used.end(), [](int u) { return u == 1; });
  };
  if (all_used(source_index) && all_used(destination_index)) return whole();
  // Used pieces get their new index; the others -1.
  const auto keep = [](const SideOutline& all, std::vector<int>& index) {
    std::vector<TransferPiece> kept;
    for (size_t i = 0; i < index.size(); ++i) {
      if (index[i] == 1) {
        index[i] = static_cast<int>(kept.size());
        kept.push_back(all.Piece(i));
      } else {
        index[i] = -1;
      }
    }
    return PieceList(std::move(kept));
  };
  tp.source = keep(source, source_index);
  tp.destination = keep(destination, destination_index);
  for (TransferMessage& message : tp.messages) {
    for (TransferMove& move : message.moves) {
      move.source = (move.forward ? destination_index : source_index)[move.source];
      move.destination = destination_index[move.destination];
    }
  }
}

}  // namespace sdrt::internal
