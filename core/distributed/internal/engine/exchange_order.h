// The order in which every rank of a transfer moves the plan's point-to-point tensors, in
// exchange groups (schedule.h runs each group as one exchange of every rank that has
// units in it). Derived alike on every rank from any plan of the same tensors, also a plan
// of one rank: it reads only each layout's per-rank byte lists (TransferLayoutPlan::sent
// and received), which every plan keeps. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_EXCHANGE_ORDER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_EXCHANGE_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sdrt/core/distributed/internal/engine/plan_types.h"

namespace sdrt::internal {

// Item k is part parts[k] of plan tensor tensors[k]; group g is items [begin[g],
// begin[g + 1]). A tensor one of whose ranks sends more than a bucket is cut into
// part_counts[t] parts by receiver (PartOf), so that each part fits a bucket; the others
// are one part. In each group every rank sends at most a bucket and receives at most a
// bucket (a sender's bytes of a part estimated from the receipts: its bytes of the tensor
// in proportion to what the part's receivers other than itself take, since plans keep no
// bytes per pair of ranks), unless one item alone gives it more (the only one of the group
// it sends, or receives, then).
struct ExchangeOrder {
  std::vector<size_t> tensors;
  std::vector<uint32_t> parts;
  std::vector<size_t> begin;
  std::vector<uint32_t> part_counts;  // by plan tensor
};

// Fills each group in turn with the items not yet taken that fit it, in plan order, so that
// a group holds items of as many senders as the buckets allow: a plan whose consecutive
// tensors come from one rank (the experts of one expert-parallel rank) does not have every
// other rank wait while that one sends. Made as each item in plan order going to the first
// group where it fits (the same groups): time, the items' per-rank lists times the log of
// the groups (a tree of minima per rank and side); memory, two byte counts per group for
// each rank and side.
ExchangeOrder OrderExchanges(const TransferPlan& plan, int64_t bucket_bytes);

// The part of plan tensor `tensor` that its messages to `destination_rank` travel in: the
// rank's place among the tensor's receivers (TransferLayoutPlan::received) scaled to the
// tensor's part count; 0 for a tensor of one part and for a rank that receives nothing of
// it (a chunk to itself).
uint32_t PartOf(const ExchangeOrder& order, const TransferTensorPlan& tensor, size_t index,
                int64_t destination_rank);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_EXCHANGE_ORDER_H_
