// A gather bucket on a CPU communicator as one grouped point-to-point exchange
// (Communicator::Exchange), instead of pack + all-gather-v + unpack: every piece goes from
// the rank that holds it to the ranks that keep full tensors, a piece of at least
// kDirectPieceBytes straight from the sender's local tensor into its place in the
// receiver's full tensor (no copy on either side but the transport's, when the piece is
// one contiguous range of the full tensor: Shard(0) pieces are), the smaller ones packed
// into one message per sender. A rank's own pieces are copied into its full tensors
// directly. Ranks that keep nothing (GatherOptions::ranks_only) receive nothing; their
// pieces still go to the keepers. Every rank derives the same messages from the items'
// layouts (the same on every rank), so the k-th send from A to B meets the k-th receive
// on B from A. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_EXCHANGE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_EXCHANGE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/gather_plan.h"

namespace sdrt::internal {

// Pieces of this many bytes and more go as messages of their own, straight into place;
// below it a message costs more than copying the piece into a packed one.
inline constexpr int64_t kDirectPieceBytes = int64_t{64} << 10;

// True when GatherBucketByExchange serves `bucket` over `comm`: the communicator works on
// the CPU and has Exchange, and every item is made on the CPU from CPU pieces of whole-byte
// elements.
bool CanExchangeBucket(const Communicator& comm, absl::Span<GatherItem* const> bucket);

// Gathers `bucket` (its items' layouts made, ExchangeShardBoxes done) into `fulls`
// (fulls[i] for bucket[i]: defined CPU tensors of the item's global shape and dtype,
// zeroed when zero_fill, on the ranks that keep; ignored elsewhere). `keeps[q]`: rank q
// keeps full tensors. Collective over `comm` (one Exchange, counted in `stats` when not
// null as a collective, a data collective and a bucket of every rank's piece bytes, packed
// ones with their 16-byte padding).
// Errors: the communicator's (naming the op, DeadlineExceeded past its timeout), and
// ResourceExhausted when a packing buffer cannot be allocated.
absl::Status GatherBucketByExchange(Communicator& comm, absl::Span<GatherItem* const> bucket,
                                    const std::vector<bool>& keeps, absl::Span<Tensor> fulls,
                                    CollectiveStats* stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_EXCHANGE_H_
