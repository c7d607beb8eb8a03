// How GatherStateDict, FullTensor and GatherShardedTensor describe a gather to the transfer
// engine (engine/transfer.h): each DTensor or ShardedTensor becomes a transfer from its own
// layout into the full tensor on every rank that keeps it (a 1-D mesh of the keeping ranks,
// Replicate), Partial mesh dims all-reduced first (engine/partial_reduce.h). A DTensor's
// layout is known to every rank from the DTensor itself; a ShardedTensor's other boxes
// arrive in the agreement (every rank's local shards' boxes, in rank order: elements no
// box covers are zero in the result). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_TRANSFER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_TRANSFER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"

namespace sdrt::internal {

// One rank's local shards' boxes of a ShardedTensor, as an agreement carries them (the
// count, then per shard its dims, offsets and sizes), and their reading from rank `q`'s
// bytes: appended to `boxes` as that rank's (TransferBox::rank = q). InvalidArgument naming
// `op`: "rank q sent a malformed shard box message", or "a shard of rank q at offsets ...
// with sizes ... does not fit in <shape>".
void PutShardBoxes(const ShardedTensor& st, std::string* out);
absl::Status GetShardBoxes(absl::string_view op, ByteReader& reader, int64_t q, IntSpan shape,
                           std::vector<TransferBox>& boxes);

class GatherTransfer {
 public:
  // A gather over `comm` into the ranks `keepers` (ranks of comm, others ignored; empty:
  // every rank), in
  // buckets of `bucket_bytes` (>= 1; the engine's minimum of 64 applies), Partial buckets
  // and exchanges on comm.device().
  // `op` names the verb in errors.
  GatherTransfer(absl::string_view op, Communicator& comm, std::vector<int> keepers,
                 int64_t bucket_bytes, std::function<void(int64_t, int64_t)> progress = nullptr);

  // Adds a DTensor (validated: its mesh spans comm, its local has this rank's local shape)
  // at `path` (viewed, not copied: it must live until Run returns)
  // whose full tensor goes to `target` on the keepers; `mesh_comm` is its mesh's
  // DeviceMeshComm over comm (for its Partial mesh dims). Returns its result's index.
  size_t AddDTensor(absl::string_view path, const DTensor& d, DeviceMeshComm* mesh_comm,
                    Device target);
  // Adds a ShardedTensor (no local shard on meta); likewise.
  size_t AddSharded(absl::string_view path, const ShardedTensor& st, Device target);
  // Changes where result i is made (before Run).
  void SetTarget(size_t i, Device target) { entries_[i].target = target; }

  // This rank's part before the agreement (no communication): the Partial reductions, and
  // without ShardedTensors the plan, the result tensors and the program. Its error is for
  // the caller's agreement, which carries payload().
  absl::Status Prepare();
  std::string payload() const;

  // After the agreement (every rank's payloads): with ShardedTensors, the plan and program
  // from every rank's boxes and one more agreement on their errors and exchange counts;
  // then the all-reduces, the exchanges and the closing. `stats` (may be null) gets the
  // engine's figures, collectives added to what it holds.
  absl::Status Run(absl::string_view op, absl::Span<const std::string> payloads,
                   TransferStats* stats);

  // Result i on a keeping rank, after Run: its full tensor (a DTensor with nothing to gather:
  // its local, or its reduced copy, on the device it is on).
  Tensor& result(size_t i) { return results_[i]; }
  bool keeps() const { return keeps_; }

 private:
  struct Entry {
    absl::string_view path;  // the caller's, which outlives the call
    const DTensor* dtensor = nullptr;
    const ShardedTensor* sharded = nullptr;
    DeviceMeshComm* mesh_comm = nullptr;
    Device target = Device::CPU();
    size_t partial = 0;  // its index in the Partial sources (DTensors)
    bool moves = false;  // gathered by the engine (else its result is its local)
  };
  // The full tensors of the keepers (CPU ones in one arena; zeroed for ShardedTensors).
  absl::Status AllocateResults();
  // The route cache's request of a gather without ShardedTensors (gather_transfer.cc).
  class Request;
  // The entry's reduced local (a DTensor with Partial mesh dims), else null.
  const Tensor* ReducedOf(const Entry& e) const;
  // The descriptor of a moving entry; `boxes`: a ShardedTensor's boxes of every rank (taken).
  void Describe(const Entry& e, std::vector<TransferBox>* boxes, TransferTensor& t) const;
  absl::Status Plan(absl::Span<const std::string> payloads);

  std::string op_;
  Communicator& comm_;
  std::vector<int> keepers_;
  bool keeps_ = true;
  std::shared_ptr<const DeviceMesh> keeper_mesh_;
  std::vector<Entry> entries_;
  std::vector<Tensor> results_;
  int64_t bucket_bytes_ = 1;  // the Partial buckets'
  TransferRunOptions options_;
  TransferRun run_;
  bool any_sharded_ = false;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_TRANSFER_H_
