// Reading once per node (LoadStateDict's kAll, LoadOptions::share_reads): a tensor that
// every rank of a node keeps alike is read from storage by one of them, which then sends it
// to the others in one grouped broadcast per reader, so a node reads the distinct bytes its
// ranks keep once (tp's norms and biases, a data-parallel replica's everything) instead of
// once per rank. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

class NodeReads {
 public:
  // Nothing shared (every rank reads its own bytes).
  NodeReads() = default;
  // `node_of_rank` (NodeOfRank's, one entry per rank of the communicator), this rank in it
  // (which must also be its rank in the DTensors' meshes) and the device of the fresh
  // tensors (LoadOptions::device); sharing needs it to be the communicator's device type.
  NodeReads(std::vector<int> node_of_rank, int rank, Device fresh_device, Device comm_device);

  // Decides who reads each target (the load's targets, in file order; a default-constructed
  // NodeReads shares nothing): a target is shared when every rank of this node fills the
  // same fresh, contiguous tensor of the same bytes: a full tensor (kReplace), or the fresh
  // local of a DTensor whose placements have no Partial and on whose every other
  // non-Replicate mesh dim all ranks of the node have one coordinate. The shared targets are
  // cut into the node's ranks' shares of their bytes, contiguous in file order (node rank
  // k reads those whose first byte falls in [k, k + 1) x total / ranks), so each reader's
  // reads stay long. The same on every rank of the node when their leaves agree (the load's
  // agreement checks that before anything is read). [t]: this rank reads target t's bytes
  // (its own, or for the node).
  std::vector<bool> Decide(const std::vector<LocalTarget>& targets);

  // After every rank's reads: each reader sends the targets it read for the node to the
  // node's other ranks, packed into buckets of at most `bucket_bytes` (one Broadcast per
  // bucket over the node's ranks: `comm` itself when all its ranks share a node, else a
  // Split of it, which every rank of `comm` takes part in). Collective over `comm` whenever
  // a node of two or more ranks exists; every rank calls it. The communicator's errors,
  // ResourceExhausted when a bucket cannot be allocated; bytes_received: what this rank got
  // from its node.
  absl::Status Share(Communicator& comm, const std::vector<LocalTarget>& targets,
                     int64_t bucket_bytes, int64_t& bytes_received) const;

 private:
  std::vector<int> node_of_rank_;
  std::vector<int> node_ranks_;  // the ranks of this rank's node, ascending
  int node_rank_ = 0;            // this rank's index in node_ranks_
  int rank_ = 0;
  bool enabled_ = false;
  std::vector<int> reader_;  // per target: the node rank reading it, or -1
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_
