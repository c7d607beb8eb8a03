#include "sdrt/core/distributed/internal/load/node_reads.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

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

NodeReads::NodeReads(std::vector<int> node_of_rank, int rank, Device fresh_device,
                     Device comm_device)
    : node_of_rank_(std::move(node_of_rank)), rank_(rank) {
  if (rank < 0 || rank >= static_cast<int>(node_of_rank_.size())) return;
  for (int q = 0; q < static_cast<int>(node_of_rank_.size()); ++q) {
    if (node_of_rank_[q] != node_of_rank_[rank]) continue;
    if (q == rank) node_rank_ = static_cast<int>(node_ranks_.size());
    node_ranks_.push_back(q);
  }
  enabled_ = node_ranks_.size() > 1 && fresh_device.type == comm_device.type;
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
    // before < total, so the share is below ranks; __int128: before x ranks may pass int64.
    reader_[t] = static_cast<int>(static_cast<__int128>(before) * ranks / std::max<int64_t>(total, 1));
    before += targets[t].dests[0].nbytes();
    reads[t] = reader_[t] == node_rank_;
  }
  return reads;
}

absl::Status NodeReads::Share(Communicator& comm, const std::vector<LocalTarget>& targets,
                              int64_t bucket_bytes, int64_t& bytes_received) const {
  bytes_received = 0;
  if (node_of_rank_.empty()) return absl::OkStatus();
  const int nodes = 1 + *std::max_element(node_of_rank_.begin(), node_of_rank_.end());
  bool any_node_shares = false;  // a node of two or more ranks: the Split is collective
  std::vector<int> ranks_per_node(static_cast<size_t>(nodes), 0);
  for (int n : node_of_rank_) any_node_shares = any_node_shares || ++ranks_per_node[n] > 1;
  if (!any_node_shares) return absl::OkStatus();
  std::unique_ptr<Communicator> split;
  if (nodes > 1) {
    SDRT_ASSIGN_OR_RETURN(split, comm.Split(node_of_rank_[rank_], rank_));
  }
  if (!enabled_) return absl::OkStatus();
  Communicator& node = split != nullptr ? *split : comm;
  // Packed, so that one broadcast carries thousands of small tensors; the buckets' sizes
  // follow from the plan alone, the same on every rank.
  const int64_t bucket_cap = std::max<int64_t>(bucket_bytes, 1);
  Tensor bucket;
  std::vector<size_t> members;
  const auto flush = [&](int reader, int64_t bytes) -> absl::Status {
    if (members.empty()) return absl::OkStatus();
    if (!bucket.defined() || bucket.nbytes() < bytes) {
      SDRT_ASSIGN_OR_RETURN(bucket, Tensor::Empty({std::min(bucket_cap, std::max(bytes, int64_t{1}))},
                                                  DType::kUInt8, Device::CPU()));
    }
    SDRT_ASSIGN_OR_RETURN(Tensor message, bucket.Narrow(0, 0, bytes));
    auto* const data = message.data<uint8_t>();
    const bool sends = reader == node_rank_;
    int64_t at = 0;
    for (size_t t : members) {
      const Tensor& dest = targets[t].dests[0];
      if (sends) std::memcpy(data + at, dest.data_ptr(), static_cast<size_t>(dest.nbytes()));
      at += dest.nbytes();
    }
    std::vector<Tensor> one = {message};
    SDRT_RETURN_IF_ERROR(node.Broadcast(absl::MakeSpan(one), reader));
    if (!sends) {
      at = 0;
      for (size_t t : members) {
        const Tensor& dest = targets[t].dests[0];
        std::memcpy(dest.data_ptr(), data + at, static_cast<size_t>(dest.nbytes()));
        at += dest.nbytes();
      }
      bytes_received += bytes;
    }
    members.clear();
    return absl::OkStatus();
  };
  for (int reader = 0; reader < static_cast<int>(node_ranks_.size()); ++reader) {
    int64_t bytes = 0;
    for (size_t t = 0; t < targets.size() && t < reader_.size(); ++t) {
      if (reader_[t] != reader) continue;
      const int64_t n = targets[t].dests[0].nbytes();
      if (n == 0) continue;
      if (n > bucket_cap) {  // larger than a bucket: broadcast in place, alone
        SDRT_RETURN_IF_ERROR(flush(reader, bytes));
        bytes = 0;
        std::vector<Tensor> one = {targets[t].dests[0]};
        SDRT_RETURN_IF_ERROR(node.Broadcast(absl::MakeSpan(one), reader));
        if (reader != node_rank_) bytes_received += n;
        continue;
      }
      if (bytes + n > bucket_cap) {
        SDRT_RETURN_IF_ERROR(flush(reader, bytes));
        bytes = 0;
      }
      members.push_back(t);
      bytes += n;
    }
    SDRT_RETURN_IF_ERROR(flush(reader, bytes));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
