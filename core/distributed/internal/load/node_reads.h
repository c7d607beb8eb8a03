// Reading once per node (LoadStateDict's kAll, LoadOptions::share_reads): a tensor that
// every rank of a node keeps alike is read from storage by one of them, and the transfer
// engine (internal/engine/transfer.h) moves it from that reader to the node's other ranks,
// so a node reads the distinct bytes its ranks keep once (tp's norms and biases, a
// data-parallel replica's everything) instead of once per rank. Not public API.
//
// The calls, every rank taking part in the collective ones in this order: the constructor
// (after NodeOfRank), Connect (collective), Decide, Prepare, payload() into the load's
// agreement, Agreed with every rank's payloads, the reads, Run (collective over the node).
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/internal/local_target.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

class NodeReads {
 public:
  // Nothing shared (every rank reads its own bytes); every call below does nothing.
  NodeReads() = default;
  // `node_of_rank` (NodeOfRank's, one entry per rank of the communicator) and this rank
  // in it. This rank shares only when `mesh_rank_is_rank` (its rank in the DTensors' meshes
  // is its communicator rank) and `fresh_device`, where the load's new tensors go
  // (LoadOptions::device), is of the communicator's device type; else it still takes part
  // in Connect.
  NodeReads(std::vector<int> node_of_rank, int rank, bool mesh_rank_is_rank, Device fresh_device,
            Device comm_device);
  NodeReads(NodeReads&&) noexcept;
  NodeReads& operator=(NodeReads&&) noexcept;
  ~NodeReads();

  // Collective over `comm` (every rank calls it) when the ranks make more than one node and
  // one of them has two or more ranks: `comm` split into the nodes' communicators. The
  // communicator's errors.
  absl::Status Connect(Communicator& comm);

  // Decides who reads each target (the load's targets, in file order): the ranks of this
  // node that fill the same bytes of a tensor make a group, and a group of two or more
  // shares it: every rank of the node for a full tensor (kReplace); for the local of a
  // DTensor without Partial placements (fresh, or the caller's own on the communicator's
  // device type, whatever its strides), the node's ranks with one
  // coordinate on every non-Replicate mesh dim (all of them under tp's Replicate; each
  // data-parallel replica's ranks under hsdp's [R, S(0)]), their local shape from `layouts`.
  // The tensors a group shares are cut into its ranks' shares of their bytes, contiguous in
  // file order (the group's k-th rank reads those whose first byte falls in [k, k + 1) x
  // total / ranks of what that group shares), so each reader's reads stay long. The same on
  // every rank of the node when their leaves agree (the load's agreement checks that before
  // anything moves). [t]: this rank reads target t's bytes (its own, or for its group).
  std::vector<bool> Decide(const std::vector<LocalTarget>& targets, LocalLayoutCache& layouts);

  // Plans the moves once the targets' fresh tensors exist: for each shared target, its
  // reader's tensor (Replicate on a 1-D mesh of the reader) into the node's other ranks'
  // (Replicate on theirs), through buckets of at most `bucket_bytes`. The engine's
  // planning errors, this rank's (for the load's agreement).
  absl::Status Prepare(const std::vector<LocalTarget>& targets, int64_t bucket_bytes);
  // What this rank's part of the load's agreement carries ("" when nothing is moved), and
  // every rank's of it (the communicator's order) after the agreement.
  std::string payload() const;
  absl::Status Agreed(absl::Span<const std::string> payloads);

  // After the reads: the moves (collective over the node's ranks; every rank of a node that
  // shares calls it, after a failed read too). The engine's errors, the same on every rank
  // of the node. `stats` gets the transfer's figures; bytes_received: the bytes this rank
  // got from its node's readers.
  absl::Status Run(TransferStats& stats, int64_t& bytes_received);

 private:
  std::vector<int> node_of_rank_;
  std::vector<int> node_ranks_;  // the ranks of this rank's node, ascending
  int node_rank_ = 0;            // this rank's index in node_ranks_
  int rank_ = 0;
  bool enabled_ = false;
  DeviceType device_type_ = DeviceType::kCPU;  // the communicator's
  std::unique_ptr<Communicator> split_;  // this node's ranks, when the ranks make several
  Communicator* node_ = nullptr;         // split_, or the load's communicator
  // One group's share of one target: the group (an index into groups_), the reader among
  // its ranks, the tensor's shape and dtype there.
  struct Share {
    size_t target = 0;
    size_t group = 0;
    int reader = 0;
    IntVector shape;
    DType dtype = DType::kFloat32;
    int64_t bytes = 0;
  };
  std::vector<Share> shares_;            // in target order, then group order
  // The groups of two or more ranks (node indices, ascending) that some target has, each
  // once, and the groups of each layout seen (a mesh and placements: a few per call).
  std::vector<std::vector<int>> groups_;
  struct LayoutGroups {
    const DeviceMesh* mesh = nullptr;
    std::vector<Placement> placements;
    std::vector<size_t> groups;
  };
  std::vector<LayoutGroups> layout_groups_;
  // The groups_ indices of `d`'s layout (SameBytesGroups of it, worked out once per layout).
  const std::vector<size_t>& GroupsOf(const DTensor& d);
  // The index of `group` in groups_, added when new.
  size_t GroupIndex(std::vector<int> group);
  int64_t received_bytes_ = 0;           // of the targets others read for this rank
  std::unique_ptr<TransferRun> run_;     // set by Prepare when the node moves anything
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_NODE_READS_H_
