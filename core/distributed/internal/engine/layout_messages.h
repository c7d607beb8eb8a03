// The messages and byte counts of one layout from its planned moves (plan.h's second step):
// every rank's moves counted into the layout's stats and per-rank lists, the kept ones merged
// and grouped into messages. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_

#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// From `moves` (every rank's moves of one tensor of layout `tp`, whose pieces are made):
// counts every move into tp.stats (wire and self bytes, messages, inter-node bytes) and
// tp.sent, received, node_sent and node_received; keeps the moves options.rank sends or
// receives (every move for -1), merges those of one (forward, source, destination) that are
// adjacent boxes, and groups them into tp.messages, one per (forward, contribution, source
// rank, destination rank) in that order, its moves by source piece, destination piece and
// box. InvalidArgument naming `tensor` when a byte count overflows.
absl::Status LayoutMessages(const TransferTensor& tensor, const TransferPlanOptions& options,
                            std::vector<TransferMove> moves, TransferLayoutPlan& tp);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LAYOUT_MESSAGES_H_
