#include "sdrt/tensor/sharding/sharding.h"

#include <algorithm>
#include <cassert>
#include <optional>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// A run of consecutive indices [start, start + size), size > 0.
struct IndexRun {
  int64_t start;
  int64_t size;
};
// An owned index set in local order (Note [Owned index sets]); empty when nothing is owned.
using Runs = absl::InlinedVector<IndexRun, 2>;

// Appends a run, merging it into the last one when it continues it; drops empty runs.
void AppendRun(Runs& runs, int64_t start, int64_t size) {
  if (size == 0) return;
  if (!runs.empty() && runs.back().start + runs.back().size == start) {
    runs.back().size += size;
  } else {
    runs.push_back({start, size});
  }
}

// Local positions (in [0, n)) that piece r gets from a shard-like placement over k ranks.
Runs PiecePositions(const Placement& p, int64_t n, int64_t k, int64_t r) {
  Runs runs;
  if (p.kind() == Placement::Kind::kShard) {
    ChunkPiece piece = ShardPiece(n, k, r);
    AppendRun(runs, piece.offset, piece.size);
    return runs;
  }
  // Only the first ceil(n / c) outer pieces are non-empty (c = ChunkSize(n, split_factor)):
  // at most n of them, however large the split factor.
  const int64_t c = ChunkSize(n, p.split_factor());
  for (int64_t j = 0; j < p.split_factor() && j * c < n; ++j) {
    ChunkPiece outer = ShardPiece(n, p.split_factor(), j);
    ChunkPiece inner = ShardPiece(outer.size, k, r);
    AppendRun(runs, outer.offset + inner.offset, inner.size);
  }
  return runs;
}

// The global indices at local positions `positions` of the owned set `owned`: the
// composition idx[d] = [idx[d][i] for i in mine] of docs/SEMANTICS.md 1.5, on runs.
Runs Compose(const Runs& owned, const Runs& positions) {
  Runs result;
  for (const IndexRun& want : positions) {
    int64_t pos = want.start;  // next local position still to map
    int64_t left = want.size;
    int64_t base = 0;  // local position of the first index of `run`
    for (const IndexRun& run : owned) {
      if (left == 0) break;
      if (pos < base + run.size) {
        int64_t take = std::min(left, base + run.size - pos);
        AppendRun(result, run.start + (pos - base), take);
        pos += take;
        left -= take;
      }
      base += run.size;
    }
    assert(left == 0);
  }
  return result;
}

int64_t RunsSize(const Runs& runs) {
  int64_t size = 0;
  for (const IndexRun& run : runs) size += run.size;
  return size;
}

// The size piece r gets from a shard-like placement over k ranks, without any list.
int64_t PieceSize(const Placement& p, int64_t n, int64_t k, int64_t r) {
  if (p.kind() == Placement::Kind::kShard) return ShardPiece(n, k, r).size;
  return StridedShardSize(n, k, p.split_factor(), r);
}

absl::Status CheckPlacementCount(const DeviceMesh& mesh, const std::vector<Placement>& placements) {
  if (static_cast<int>(placements.size()) == mesh.ndim()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "sharding: ", placements.size(), " placements ", PlacementsToString(placements), " for a ",
      mesh.ndim(), "-d mesh ", ShapeToString(mesh.shape()), "; need one per mesh dim"));
}

absl::Status ValidateArguments(IntSpan global_shape, const DeviceMesh& mesh,
                               const std::vector<Placement>& placements) {
  SDRT_RETURN_IF_ERROR(CheckPlacementCount(mesh, placements));
  for (int64_t n : global_shape) {
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharding: negative global shape ", ShapeToString(global_shape)));
    }
  }
  for (const Placement& p : placements) {
    if (!p.is_shard_like()) continue;
    if (p.dim() < 0 || p.dim() >= static_cast<int>(global_shape.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("sharding: placement ", p.ToString(), " shards dim ", p.dim(),
                       " of a tensor of global shape ", ShapeToString(global_shape)));
    }
    if (p.split_factor() < 1 || p.split_factor() > kMaxSplitFactor) {
      return absl::InvalidArgumentError(absl::StrCat("sharding: placement ", p.ToString(),
                                                     " has split factor ", p.split_factor(),
                                                     ", outside [1, ", kMaxSplitFactor, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

ChunkPiece ShardPiece(int64_t n, int64_t k, int64_t r) {
  assert(n >= 0 && k >= 1 && r >= 0 && r < k);
  int64_t start = ChunkSize(n, k) * r;
  if (start >= n) return {0, n};
  return {std::min(n - start, ChunkSize(n, k)), start};
}

int64_t StridedShardSize(int64_t n, int64_t k, int64_t split_factor, int64_t r) {
  if (n == 0) return 0;
  // The outer pieces: `full` of size c, then one of size `rest` when c does not divide n,
  // then empty ones (ceil(n / c) <= split_factor because split_factor * c >= n).
  const int64_t c = ChunkSize(n, split_factor);
  const int64_t full = n / c;
  const int64_t rest = n - full * c;
  return full * ShardPiece(c, k, r).size + (rest > 0 ? ShardPiece(rest, k, r).size : 0);
}

std::vector<int64_t> StridedShardIndices(int64_t n, int64_t k, int64_t split_factor, int64_t r) {
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(StridedShardSize(n, k, split_factor, r)));
  for (const IndexRun& run : PiecePositions(Placement::StridedShard(0, split_factor), n, k, r)) {
    for (int64_t i = 0; i < run.size; ++i) indices.push_back(run.start + i);
  }
  return indices;
}

absl::StatusOr<LocalShardInfo> ComputeLocalShapeAndGlobalOffset(
    IntSpan global_shape, const DeviceMesh& mesh, const std::vector<Placement>& placements,
    int64_t rank) {
  SDRT_RETURN_IF_ERROR(ValidateArguments(global_shape, mesh, placements));
  LocalShardInfo info;
  std::optional<IntVector> coord = mesh.Coordinate(rank);
  if (!coord.has_value()) {
    info.local_shape = {0};
    return info;
  }
  const size_t ndim = global_shape.size();
  const bool strided = std::any_of(placements.begin(), placements.end(), [](const Placement& p) {
    return p.is_shard_like() && p.kind() != Placement::Kind::kShard;
  });
  if (!strided) {
    // Shard, Replicate and Partial only: every dim stays one run, re-split in place (the
    // same result as composing runs below, without the lists).
    info.local_shape.assign(global_shape.begin(), global_shape.end());
    info.global_offset.assign(ndim, 0);
    for (int i = 0; i < mesh.ndim(); ++i) {
      const Placement& p = placements[i];
      if (!p.is_shard_like()) continue;
      const ChunkPiece piece = ShardPiece(info.local_shape[p.dim()], mesh.size(i), (*coord)[i]);
      info.global_offset[p.dim()] += piece.offset;
      info.local_shape[p.dim()] = piece.size;
    }
    for (size_t d = 0; d < ndim; ++d) {
      if (info.local_shape[d] == 0) info.global_offset[d] = global_shape[d];
    }
    return info;
  }
  std::vector<Runs> owned(ndim);
  for (size_t d = 0; d < ndim; ++d) AppendRun(owned[d], 0, global_shape[d]);
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& p = placements[i];
    if (!p.is_shard_like()) continue;
    Runs& runs = owned[p.dim()];
    runs = Compose(runs, PiecePositions(p, RunsSize(runs), mesh.size(i), (*coord)[i]));
  }
  info.local_shape.resize(ndim);
  info.global_offset.resize(ndim);
  info.index_lists.resize(ndim);
  for (size_t d = 0; d < ndim; ++d) {
    const Runs& runs = owned[d];
    info.local_shape[d] = RunsSize(runs);
    // An untouched dim of size 0 and an empty shard both report the global dim size.
    info.global_offset[d] = runs.empty() ? global_shape[d] : runs.front().start;
    if (runs.size() <= 1) continue;
    info.is_slice = false;
    std::vector<int64_t>& list = info.index_lists[d];
    list.reserve(static_cast<size_t>(info.local_shape[d]));
    for (const IndexRun& run : runs) {
      for (int64_t j = 0; j < run.size; ++j) list.push_back(run.start + j);
    }
  }
  return info;
}

absl::StatusOr<IntVector> ComputeLocalShape(IntSpan global_shape, const DeviceMesh& mesh,
                                            const std::vector<Placement>& placements,
                                            int64_t rank) {
  SDRT_RETURN_IF_ERROR(ValidateArguments(global_shape, mesh, placements));
  std::optional<IntVector> coord = mesh.Coordinate(rank);
  if (!coord.has_value()) return IntVector{0};
  IntVector local(global_shape.begin(), global_shape.end());
  for (int i = 0; i < mesh.ndim(); ++i) {
    const Placement& p = placements[i];
    if (p.is_shard_like()) {
      local[p.dim()] = PieceSize(p, local[p.dim()], mesh.size(i), (*coord)[i]);
    }
  }
  return local;
}

std::vector<int64_t> OwnedIndices(const LocalShardInfo& info, int dim) {
  if (static_cast<size_t>(dim) < info.index_lists.size() && !info.index_lists[dim].empty()) {
    return info.index_lists[dim];
  }
  std::vector<int64_t> indices(static_cast<size_t>(info.local_shape[dim]));
  for (size_t j = 0; j < indices.size(); ++j) {
    indices[j] = info.global_offset[dim] + static_cast<int64_t>(j);
  }
  return indices;
}

int64_t NumShards(const DeviceMesh& mesh, const std::vector<Placement>& placements) {
  assert(static_cast<int>(placements.size()) == mesh.ndim());
  int64_t shards = 1;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (placements[i].is_shard_like()) shards *= mesh.size(i);
  }
  return shards;
}

absl::StatusOr<std::vector<int>> MeshDimsToReplicate(const DeviceMesh& mesh,
                                                     const std::vector<Placement>& placements) {
  SDRT_RETURN_IF_ERROR(CheckPlacementCount(mesh, placements));
  std::vector<int> order;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_replicate() && mesh.size(i) > 1) order.push_back(i);
  }
  if (NumShards(mesh, placements) > 1) std::reverse(order.begin(), order.end());
  return order;
}

absl::Status ValidateLocalShape(IntSpan local_shape, IntSpan global_shape, const DeviceMesh& mesh,
                                const std::vector<Placement>& placements, int64_t rank,
                                absl::string_view name) {
  SDRT_ASSIGN_OR_RETURN(IntVector expected,
                        ComputeLocalShape(global_shape, mesh, placements, rank));
  std::optional<IntVector> coord = mesh.Coordinate(rank);
  if (coord.has_value() &&
      std::equal(local_shape.begin(), local_shape.end(), expected.begin(), expected.end())) {
    return absl::OkStatus();
  }
  const std::string who =
      absl::StrCat(name.empty() ? "" : absl::StrCat("'", name, "': "), "rank ", rank);
  if (!coord.has_value()) {
    for (int64_t n : local_shape) {
      if (n == 0) return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "ValidateLocalShape: ", who, " is not in ", mesh.ToString(),
        " and must hold no elements, but holds a local shape ", ShapeToString(local_shape)));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "ValidateLocalShape: ", who, " (mesh coordinate ", ShapeToString(*coord),
      ") holds local shape ", ShapeToString(local_shape), " but global shape ",
      ShapeToString(global_shape), " with placements ", PlacementsToString(placements), " on mesh ",
      ShapeToString(mesh.shape()), " needs local shape ", ShapeToString(expected)));
}

}  // namespace sdrt
