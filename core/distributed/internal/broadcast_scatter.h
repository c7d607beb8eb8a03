// A broadcast bucket whose tensors every rank keeps only a piece of, as a scatter: on a CPU
// communicator with Exchange, when every tensor of the bucket goes into DTensors whose
// every mesh dim is Shard (each element kept by exactly one rank: FSDP, FSDP x TP) and the
// pieces are large, the root sends each rank only its own pieces in one grouped exchange
// instead of broadcasting all the bytes to everyone. A piece of at least kDirectPieceBytes that is
// one contiguous range of the root's tensor (a Shard(0) piece) goes straight from the
// root's tensor into the rank's local; the smaller ones travel packed, one message per
// rank. Every rank's layout is its own local DTensor's (the ranks agreed on their local
// skeletons, placements and meshes included), so the root works out what each rank keeps
// from its own locals, and every rank the same messages. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SCATTER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SCATTER_H_

#include <vector>

#include "absl/status/status.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/buckets.h"
#include "sdrt/core/distributed/internal/local_target.h"

namespace sdrt::internal {

// What a scattered bucket reads: per planned tensor t, its dtype, its target on this rank
// (a DTensor target: its dests and runs), and on the root its source tensor.
struct ScatterTensors {
  const std::vector<DType>& dtypes;
  const std::vector<LocalTarget*>& targets;
  const std::vector<const Tensor*>& sources;  // the root's only (nullptr elsewhere)
  const std::vector<PlannedTensor>& planned;
};

// True when ScatterBucket serves `bucket`: the communicator works on the CPU and has
// Exchange, the bucket's pieces give each rank kDirectPieceBytes or more on average (its
// bytes go mostly straight into place: for many small tensors a broadcast of the bucket is
// cheaper than packing a message per rank on the root), and every tensor of the bucket has
// a DTensor target on the CPU of whole-byte elements whose placements are all Shard (no
// Replicate, Partial or _StridedShard).
bool CanScatterBucket(const Communicator& comm, const Bucket& bucket, const ScatterTensors& tensors);

// Moves bucket `bucket` from `root` into every rank's targets: the root copies its own
// pieces, sends the others', and every rank receives its own. Collective over `comm` (one
// Exchange, counted in `stats` as a collective, a data collective and a bucket; on the
// root also the bytes it sends, packing padding included). Errors: the communicator's, ResourceExhausted when a packing
// buffer cannot be allocated, and the sharding errors of a layout that does not fit.
absl::Status ScatterBucket(Communicator& comm, int root, const Bucket& bucket,
                           const ScatterTensors& tensors, CollectiveStats& stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_BROADCAST_SCATTER_H_
