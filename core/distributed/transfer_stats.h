// What one call of sdrt's transfer engine moved: the figures every distributed verb reports
// (GatherStateDict, BroadcastStateDict, DistributeStateDict, FullTensor and
// GatherShardedTensor in distributed_state_dict.h and dtensor_ops.h; PlanReshard,
// ExecuteReshard, BoundReshard::Execute and ReshardStateDict in reshard_state_dict.h;
// LoadStateDict of a sharded folder in load_state_dict.h). Each of those verbs describes its
// move to the one planner and executor (docs/ARCHITECTURE.md, "One transfer engine"), so
// one struct says what any of them did. Bytes are tensor bytes.
#ifndef SDRT_CORE_DISTRIBUTED_TRANSFER_STATS_H_
#define SDRT_CORE_DISTRIBUTED_TRANSFER_STATS_H_

#include <cstdint>

#include "sdrt/export.h"

namespace sdrt SDRT_API {

struct TransferStats {
  // The plan's figures, the same on every rank.
  // Bytes moved between different ranks (a collective's bytes once per receiving rank).
  int64_t wire_bytes = 0;
  // The least any plan must move between ranks: over destination pieces, the bytes the piece
  // needs (times the contributions of a Partial source) minus those its own rank holds.
  // wire_bytes == optimum_bytes for point-to-point plans; an all-gather sends a replicated
  // source's bytes also to the ranks that hold them.
  int64_t optimum_bytes = 0;
  int64_t self_bytes = 0;          // copied from a rank's sources to its own destinations
  int64_t max_sent_bytes = 0;      // wire bytes of the busiest sender
  int64_t max_received_bytes = 0;  // wire bytes of the busiest receiver
  int64_t messages = 0;            // (tensor, sender, receiver) triples between ranks
  int64_t internode_bytes = 0;     // wire bytes between ranks of different nodes
  // Data exchanges every rank makes: point-to-point rounds (the busiest rank's count) and
  // collectives (broadcasts, all-gathers, all-reduces of buckets), each at most one bucket
  // per rank, except one tensor larger than a bucket that a collective moves whole.
  int64_t exchanges = 0;
  // Tensors whose dtype changes on the way (a cast, or FP8 codes made with scales): by the
  // senders, so that the wire carries the narrower dtype (the destination's), or by the
  // receivers after the move (the source's narrower). The other tensors move as they are.
  // ReshardPlan::casts() names them tensor by tensor.
  int64_t cast_by_senders = 0;
  int64_t cast_by_receivers = 0;

  // This rank's figures in the call.
  int64_t collectives = 0;     // every Communicator call: agreements, exchanges, the closing
  int64_t sent_bytes = 0;      // to other ranks
  int64_t received_bytes = 0;  // from other ranks
  int64_t buffer_bytes = 0;    // its buckets (the peak extra memory of the call)
};

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_TRANSFER_STATS_H_
