#include "sdrt/core/distributed/internal/load/node_reads.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";

// Every rank of `node_ranks` holds the same bytes of `d`: no Partial, and one coordinate
// on each mesh dim that is not Replicate.
bool SameOnEveryRank(const DTensor& d, const std::vector<int>& node_ranks, int rank) {
  if (d.mesh() == nullptr) return false;
  const std::optional<IntVector> mine = d.mesh()->Coordinate(rank);
  if (!mine.has_value()) return false;
  for (int q : node_ranks) {
    const std::optional<IntVector> theirs = d.mesh()->Coordinate(q);
    if (!theirs.has_value()) return false;
    for (size_t i = 0; i < d.placements().size(); ++i) {
      const Placement& p = d.placements()[i];
      if (p.is_partial()) return false;
      if (!p.is_replicate() && (*theirs)[i] != (*mine)[i]) return false;
    }
  }
  return true;
}

}  // namespace

NodeReads::NodeReads(std::vector<int> node_of_rank, int rank, bool mesh_rank_is_rank,
                     Device fresh_device, Device comm_device)
    : node_of_rank_(std::move(node_of_rank)), rank_(rank) {
  if (rank < 0 || rank >= static_cast<int>(node_of_rank_.size())) {
    node_of_rank_.clear();
    return;
  }
  for (int q = 0; q < static_cast<int>(node_of_rank_.size()); ++q) {
    if (node_of_rank_[q] != node_of_rank_[rank]) continue;
    if (q == rank) node_rank_ = static_cast<int>(node_ranks_.size());
    node_ranks_.push_back(q);
  }
  enabled_ = mesh_rank_is_rank && node_ranks_.size() > 1 && fresh_device.type == comm_device.type;
}

NodeReads::NodeReads(NodeReads&&) noexcept = default;
NodeReads& NodeReads::operator=(NodeReads&&) noexcept = default;
NodeReads::~NodeReads() = default;

absl::Status NodeReads::Connect(Communicator& comm) {
  node_ = &comm;
  if (node_of_rank_.empty()) return absl::OkStatus();
  const int nodes = 1 + *std::max_element(node_of_rank_.begin(), node_of_rank_.end());
  std::vector<int> ranks_per_node(static_cast<size_t>(nodes), 0);
  bool some_node_shares = false;
  for (int n : node_of_rank_) some_node_shares = some_node_shares || ++ranks_per_node[n] > 1;
  if (nodes > 1 && some_node_shares) {
    SDRT_ASSIGN_OR_RETURN(split_, comm.Split(node_of_rank_[rank_], rank_));
    node_ = split_.get();
  }
  return absl::OkStatus();
}

std::vector<bool> NodeReads::Decide(const std::vector<LocalTarget>& targets) {
  reader_.assign(targets.size(), -1);
  std::vector<bool> reads(targets.size(), true);
  if (!enabled_) return reads;
  int64_t total = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const LocalTarget& target = targets[t];
    const bool shared =
        target.dests.size() == 1 &&
        (target.kind == LocalTarget::Kind::kReplace ||
         (target.kind == LocalTarget::Kind::kFreshDTensor &&
          SameOnEveryRank(target.leaf->value->as_dtensor(), node_ranks_, rank_)));
    if (!shared) continue;
    reader_[t] = 0;  // shared; the reader is set below
    total += target.dests[0].nbytes();
  }
  const auto ranks = static_cast<int64_t>(node_ranks_.size());
  int64_t before = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    if (reader_[t] < 0) continue;
    // before < total, so the share is below `ranks`; __int128: before x ranks may pass int64.
    reader_[t] =
        static_cast<int>(static_cast<__int128>(before) * ranks / std::max<int64_t>(total, 1));
    before += targets[t].dests[0].nbytes();
    reads[t] = reader_[t] == node_rank_;
  }
  return reads;
}

absl::Status NodeReads::Prepare(const std::vector<LocalTarget>& targets, int64_t bucket_bytes) {
  received_bytes_ = 0;
  size_t shared = 0;
  for (int r : reader_) shared += r >= 0;
  if (!enabled_ || shared == 0 || node_ == nullptr) return absl::OkStatus();
  // A 1-D mesh of each reader, and of the node's other ranks (the node's own numbering).
  const int ranks = static_cast<int>(node_ranks_.size());
  std::vector<std::shared_ptr<const DeviceMesh>> reader_mesh(ranks), others_mesh(ranks);
  for (int r = 0; r < ranks; ++r) {
    std::vector<int64_t> others;
    for (int q = 0; q < ranks; ++q) {
      if (q != r) others.push_back(q);
    }
    SDRT_ASSIGN_OR_RETURN(DeviceMesh one, DeviceMesh::Create({1}, {r}));
    SDRT_ASSIGN_OR_RETURN(DeviceMesh rest,
                          DeviceMesh::Create({static_cast<int64_t>(others.size())}, others));
    reader_mesh[r] = std::make_shared<const DeviceMesh>(std::move(one));
    others_mesh[r] = std::make_shared<const DeviceMesh>(std::move(rest));
  }
  const std::vector<Placement> replicate = {Placement::Replicate()};
  const absl::Span<TransferTensor> tensors = ReusedDescriptors(shared);
  TransferLocals sources, destinations;
  size_t i = 0;
  for (size_t t = 0; t < targets.size(); ++t) {
    const int r = reader_[t];
    if (r < 0) continue;
    const Tensor& dest = targets[t].dests[0];
    TransferTensor& d = tensors[i++];
    d.name = std::string(targets[t].leaf->path);
    d.dtype = dest.dtype();
    d.shape.assign(dest.shape().begin(), dest.shape().end());
    d.source.mesh = reader_mesh[r];
    d.source.placements = replicate;
    d.destination.mesh = others_mesh[r];
    d.destination.placements = replicate;
    const absl::Span<const Tensor> mine(&dest, 1);
    sources.Add(r == node_rank_ ? mine : absl::Span<const Tensor>());
    destinations.Add(r == node_rank_ ? absl::Span<const Tensor>() : mine);
    if (r != node_rank_) received_bytes_ += dest.nbytes();
  }
  TransferRunOptions options;
  options.bucket_bytes = std::max<int64_t>(bucket_bytes, 64);
  run_ = std::make_unique<TransferRun>();
  absl::Status prepared = run_->Prepare(*node_, DescribedTransfer(tensors), std::move(sources),
                                        std::move(destinations), options);
  if (!prepared.ok()) run_.reset();
  return prepared;
}

std::string NodeReads::payload() const { return run_ != nullptr ? run_->payload() : ""; }

absl::Status NodeReads::Agreed(absl::Span<const std::string> payloads) {
  if (run_ == nullptr) return absl::OkStatus();
  std::vector<std::string> node_payloads;  // in the node communicator's order
  for (int q : node_ranks_) {
    node_payloads.push_back(q < static_cast<int>(payloads.size()) ? payloads[q] : "");
  }
  return run_->Agreed(node_payloads);
}

absl::Status NodeReads::Run(TransferStats& stats, int64_t& bytes_received) {
  bytes_received = 0;
  if (run_ == nullptr) return absl::OkStatus();
  SDRT_RETURN_IF_ERROR(run_->Run(kOp, &stats));
  bytes_received = received_bytes_;
  return absl::OkStatus();
}

}  // namespace sdrt::internal
