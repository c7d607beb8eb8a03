// The messages and byte counts of one layout from its planned moves (plan.h's second step):
// every rank's moves counted into the layout's stats and per-rank lists as the planner makes
// them, piece by piece, the kept ones merged and grouped into messages. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/grid.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/split.h"

namespace sdrt::internal {

// Bytes per rank (or node) of one layout, with which indices were added to: a layout's
// sent, received, node_sent and node_received lists. Dense below `dense` (ranks, and node
// ids that are small numbers), in a map otherwise (node ids are the caller's).
class PerRankBytes {
 public:
  explicit PerRankBytes(int64_t dense);

  // Adds `bytes` to `index`'s sum; InvalidArgument naming `tensor` when it overflows.
  // Inline for a dense index: a plan adds per move.
  absl::Status Add(int64_t index, int64_t bytes, const TransferTensor& tensor) {
    return TransferAdd(Slot(index), bytes, tensor);
  }

  // Adds `times` x bytes for each (index, bytes) of `list` (sorted by index), the dense
  // part grown to every index of it below kMaxMeshRanks; false when a sum overflows.
  bool AddTimes(const std::vector<std::pair<int64_t, int64_t>>& list, int64_t times);

  // (index, bytes) of every index added to, by index.
  void List(std::vector<std::pair<int64_t, int64_t>>& out);

  // The largest sum; 0 when none.
  int64_t Max() const;

 private:
  static constexpr int64_t kUnset = -1;  // not added to yet (sums are >= 0)
  bool Dense(int64_t index) const {
    return index >= 0 && index < static_cast<int64_t>(bytes_.size());
  }
  // `index`'s sum, 0 and listed in `indices_` when first asked for (inline when dense).
  int64_t& Slot(int64_t index) {
    if (!Dense(index)) return SparseSlot(index);
    int64_t& total = bytes_[static_cast<size_t>(index)];
    if (total == kUnset) {
      total = 0;
      indices_.push_back(index);
    }
    return total;
  }
  int64_t& SparseSlot(int64_t index);
  // The sum of an index added to.
  int64_t At(int64_t index) const {
    return Dense(index) ? bytes_[static_cast<size_t>(index)] : sparse_.at(index);
  }

  std::vector<int64_t> bytes_;
  absl::flat_hash_map<int64_t, int64_t> sparse_;
  std::vector<int64_t> indices_;
};

// Counts the moves of one layout `tp` of pieces `source` and `destination` as the planner
// makes them: each into tp.stats (wire and self bytes, messages, inter-node bytes) and
// tp.sent, received, node_sent and node_received; keeps the moves options.rank sends or
// receives (every move for -1). Finish merges the kept moves of one (forward, source,
// destination) that are adjacent boxes and groups them into tp.messages, one per (forward,
// contribution, source rank, destination rank) in that order, its moves by source piece,
// destination piece and box. `tensor`, `options`, the sides and `tp` outlive this object.
class LayoutMessages {
 public:
  LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                 const SideOutline& source, const SideOutline& destination, TransferLayoutPlan& tp);

  // Counts `moves`, every move to destination piece `destination` (a piece's moves in one
  // call or several, the pieces in order), keeps options.rank's (made whole: their boxes
  // copied) and clears `moves` (its capacity stays). InvalidArgument naming the tensor when
  // a byte count overflows.
  absl::Status Count(int destination, std::vector<PlannedMove>& moves);

  // Writes tp.messages and the per-rank lists, once every piece is counted.
  absl::Status Finish();

 private:
  // With the layout's ranks and the options' dense node ids counted once.
  LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                 const SideOutline& source, const SideOutline& destination, TransferLayoutPlan& tp,
                 int64_t ranks, int64_t nodes);
  int64_t NodeOf(int64_t rank) const {
    return rank < static_cast<int64_t>(options_.node_of_rank.size())
               ? options_.node_of_rank[static_cast<size_t>(rank)]
               : -1 - rank;
  }

  const TransferTensor& tensor_;
  const TransferPlanOptions& options_;
  const SideOutline& source_;
  const SideOutline& destination_;
  TransferLayoutPlan& tp_;
  PerRankBytes sent_, received_, node_sent_, node_received_;
  // Each destination rank has one piece here: a message of contribution 0 to a piece's
  // rank comes from that piece's moves only, so it is counted once there, by the piece
  // that last counted its source rank (`counted_by_`; `forwarded_by_` for forwards, whose
  // source is a relay). Other messages' keys go to `keys_`, counted once each at the end.
  bool one_piece_per_rank_ = true;
  std::vector<int> counted_by_;
  std::vector<int> forwarded_by_;
  std::vector<uint64_t> keys_;
  std::vector<TransferMove> kept_;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_
