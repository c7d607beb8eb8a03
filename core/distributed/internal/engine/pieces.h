// The pieces of one side of a reshard (plan.h): each rank's owned runs under a
// DTensor layout or a list of ShardedTensor boxes, validated against hostile
// descriptors, outlined for the planner and made whole for what a plan keeps. Not public
// API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// The sides one PlanTransfer has made, by a key of what decides a side (the tensor's dtype
// and shape, which side, its mesh and placements or boxes: PlanTransfer's), with what a
// source side gives its layout (Partial contributions and their op). Holds at most
// `max_pieces` pieces: the sides made first are dropped first (a model's tensors that share
// a side are near each other; a plan of every shape distinct shares none).
class PieceCache {
 public:
  struct Side {
    std::shared_ptr<const SideOutline> outline;
    int64_t contributions = 1;
    ReduceOp reduce_op = ReduceOp::kSum;
    PieceList whole;  // the outline's pieces whole, once a plan keeps them all (Whole)
  };
  // `node_of_rank`: TransferPlanOptions's, for SideOutline::replicas_apart.
  explicit PieceCache(int64_t max_pieces, std::vector<int64_t> node_of_rank = {})
      : max_pieces_(max_pieces), node_of_rank_(std::move(node_of_rank)) {}
  const std::vector<int64_t>& node_of_rank() const { return node_of_rank_; }

  const Side* Find(const std::string& key) const {
    const auto it = sides_.find(key);
    return it == sides_.end() ? nullptr : &it->second;
  }
  void Add(const std::string& key, Side side);

  // The pieces of a mesh side but their boxes' runs: per rank its box (the ranks that agree
  // on the sharded mesh dims share one, numbered in mesh order), contribution and identity,
  // and the first rank of each box. They follow from the mesh and the kinds of its
  // placements (and their reduce ops) alone, not the tensor's shape: kept by a key of those
  // for the sides that share them, all dropped once they hold more than `max_pieces`.
  struct Pattern {
    std::shared_ptr<const std::vector<OutlinePiece>> pieces;
    std::vector<int64_t> box_ranks;
    bool replicas_apart = false;  // SideOutline's, by `node_of_rank`
  };
  const Pattern* FindPattern(const std::string& key) const {
    const auto it = patterns_.find(key);
    return it == patterns_.end() ? nullptr : &it->second;
  }
  // Valid until the next AddPattern.
  const Pattern& AddPattern(std::string key, Pattern pattern);

  // Every piece of `outline` whole (SideOutline::Piece), in its order: made once for the
  // side cached under `key` when that is `outline`, so the plans that keep a side whole
  // share it (a world's side under every layout of a shape); made anew otherwise.
  PieceList Whole(const std::string& key, const SideOutline& outline);

 private:
  int64_t max_pieces_;
  std::vector<int64_t> node_of_rank_;
  int64_t pieces_ = 0;
  absl::flat_hash_map<std::string, Side> sides_;
  std::deque<std::string> order_;  // the keys, first made first
  absl::flat_hash_map<std::string, Pattern> patterns_;
  int64_t pattern_pieces_ = 0;
};

// Both sides of a layout as the planner reads them.
struct LayoutOutlines {
  std::shared_ptr<const SideOutline> source;
  std::shared_ptr<const SideOutline> destination;
};

// Fills `outlines` (the pieces of both sides) and `plan`'s Partial contributions and their
// op from `tensor`: one piece per mesh rank in mesh order, or one per box in box order
// (local = how many earlier boxes share its rank). Empty pieces are kept (they have no runs
// on some dim). Checks the tensor's dims, element and byte counts and, for sub-byte dtypes,
// that no piece is cut inside a byte. A side whose key (source_key, destination_key) is in
// `cache` is taken from it (the checks passed when it was made), a side made is added.
// Errors as PlanTransfer's, naming the tensor and the side.
absl::Status LayoutPieces(const TransferTensor& tensor, const std::string& source_key,
                          const std::string& destination_key, PieceCache& cache,
                          TransferLayoutPlan& plan, LayoutOutlines& outlines);

// The pieces a plan of a layout keeps (tp.source, tp.destination) from its outlines
// `sides`, once its messages are planned: for a plan of one rank (`rank` >= 0) of a
// point-to-point layout, the pieces the rank uses (its own and those its kept moves name,
// in their order, the moves renumbered); else, or when the rank uses every piece, every
// piece (shared through `cache`, by the sides' keys, by the plans that keep a side whole).
// At 1,024 ranks a side's every piece would be most of a rank's plan, and the verbs look
// for their own pieces in it per tensor and call.
void KeepPieces(int64_t rank, const LayoutOutlines& sides, const std::string& source_key,
                const std::string& destination_key, PieceCache& cache, TransferLayoutPlan& tp);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PIECES_H_
