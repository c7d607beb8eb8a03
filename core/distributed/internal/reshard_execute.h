// Running a reshard plan (reshard_plan.h) on one rank of a communicator that spans both
// sides (issue 14, the executor): the plan's messages are cut into chunks of at most one
// bucket, the chunks are scheduled into rounds that every rank derives alike from the
// plan, and each round is one Communicator::Exchange (MPI_Isend/Irecv, or ncclSend/ncclRecv
// in one group): this rank packs its chunks for other ranks into its send bucket, receives
// the chunks for it into its receive bucket and unpacks them into its destination locals;
// a chunk to itself is packed and unpacked without the wire. Peak extra memory per rank:
// the two buckets (each at most bucket_bytes, or one row of a box when a row is larger),
// whatever the size of the largest tensor. Not public API yet.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_EXECUTE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_EXECUTE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/reshard_plan.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

struct ReshardExecuteOptions {
  // The most bytes one rank sends (or receives) in one round; >= 64.
  int64_t bucket_bytes = int64_t{256} << 20;
};

// The chunks of a plan and their rounds: a value, derived once per (plan, bucket_bytes)
// and the same on every rank.
struct ReshardSchedule {
  std::vector<ReshardMessage> chunks;  // the plan's messages cut to at most a bucket each
  std::vector<size_t> round_begin;     // chunks [round_begin[i], round_begin[i + 1]) are round i
  size_t rounds() const { return round_begin.empty() ? 0 : round_begin.size() - 1; }
};

// What one rank did in ExecuteReshard.
struct ReshardExecuteStats {
  int64_t rounds = 0;          // one Exchange each
  int64_t sent_bytes = 0;      // to other ranks
  int64_t received_bytes = 0;  // from other ranks
  int64_t self_bytes = 0;      // copied from this rank's sources to its destinations
  int64_t buffer_bytes = 0;    // the send and receive buckets, allocated once
};

// Cuts every message of `plan` so that no chunk holds more than options.bucket_bytes
// (a box is cut along its first dim of extent > 1 into whole rows, whole bytes for
// sub-byte dtypes; a row larger than a bucket along its next dim; one element or one
// whole-byte group is never cut) and groups the chunks, in plan order, into rounds in
// which no rank sends, or receives, more than a bucket (a chunk larger than a bucket
// travels in a round of its own for its ranks). InvalidArgument for bucket_bytes < 64 or
// more than 2^24 chunks.
absl::StatusOr<ReshardSchedule> ScheduleReshard(const ReshardPlan& plan,
                                                const ReshardExecuteOptions& options);

// Collective over `comm`, whose ranks are the plan's global ranks (every rank calls it
// with the same plan and schedule). `sources[t]` are this rank's source locals of plan
// tensor t (indexed by ReshardPiece::local; empty when it holds none; any strides),
// `destinations[t]` its destination locals (allocated, of the pieces' shapes and dtype,
// filled in place; any strides without overlap). Tensors are on comm.device() (the CPU for
// MPI). On return every destination local holds its piece. Every local this rank's pieces
// need is checked before anything moves (the caller agrees on such errors across ranks
// first: one rank returning early leaves the others waiting until the deadline).
// InvalidArgument when
// sources or destinations have a size other than plan.tensors.size(), when a local needed
// is missing or of the wrong dtype or shape (PackMessage's errors), or comm.size() is not
// larger than every rank of the plan; the communicator's errors (DeadlineExceeded names
// the missing ranks) as they are; ResourceExhausted when a bucket cannot be allocated.
absl::Status ExecuteReshard(const ReshardPlan& plan, const ReshardSchedule& schedule,
                            Communicator& comm, absl::Span<const std::vector<Tensor>> sources,
                            absl::Span<const std::vector<Tensor>> destinations,
                            ReshardExecuteStats* stats = nullptr);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_EXECUTE_H_
