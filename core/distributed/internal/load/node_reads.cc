#include "sdrt/core/distributed/internal/load/node_reads.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr absl::string_view kOp = "LoadStateDict";

// The groups of `node_ranks` (node indices into it) that hold the same bytes of `d`: ranks
// with one coordinate on every mesh dim that is not Replicate; none for a Partial placement
// or a rank off the mesh. Groups in the order of their first rank.
std::vector<std::vector<int>> SameBytesGroups(const DTensor& d,
                                             const std::vector<int>& node_ranks) {
  std::vector<std::vector<int>> groups;
  if (d.mesh() == nullptr) return groups;
  for (const Placement& p : d.placements()) {
    if (p.is_partial()) return groups;
  }
  std::vector<IntVector> keys;  // per group: its coordinates on the non-Replicate dims
  for (int k = 0; k < static_cast<int>(node_ranks.size()); ++k) {
    const std::optional<IntVector> at = d.mesh()->Coordinate(node_ranks[k]);
    if (!at.has_value()) return {};
    IntVector key;
    for (size_t i = 0; i < d.placements().size(); ++i) {
      if (!d.placements()[i].is_replicate()) key.push_back((*at)[i]);
    }
    const auto found = std::find(keys.begin(), keys.end(), key);
    if (found == keys.end()) {
      keys.push_back(key);
      groups.push_back({k});
    } else {
      groups[static_cast<size_t>(found - keys.begin())].push_back(k);
    }
  }
  return groups;
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
  device_type_ = comm_device.type;
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

const std::vector<size_t>& NodeReads::GroupsOf(const DTensor& d) {
  // Consecutive tensors mostly share a layout: the last one is tried first.
  const auto same = [&](const LayoutGroups& l) {
    return l.mesh == d.mesh().get() && l.placements == d.placements();
  };
  if (!layout_groups_.empty() && same(layout_groups_.back())) return layout_groups_.back().groups;
  for (const LayoutGroups& l : layout_groups_) {
    if (same(l)) return l.groups;
  }
  LayoutGroups entry{d.mesh().get(), d.placements(), {}};
  for (std::vector<int>& group : SameBytesGroups(d, node_ranks_)) {
    if (group.size() >= 2) entry.groups.push_back(GroupIndex(std::move(group)));
  }
  layout_groups_.push_back(std::move(entry));
  return layout_groups_.back().groups;
}

size_t NodeReads::GroupIndex(std::vector<int> group) {
  const auto found = std::find(groups_.begin(), groups_.end(), group);
  if (found != groups_.end()) return static_cast<size_t>(found - groups_.begin());
  groups_.push_back(std::move(group));
  return groups_.size() - 1;
}

std::vector<bool> NodeReads::Decide(const std::vector<LocalTarget>& targets,
                                    LocalLayoutCache& layouts) {
  shares_.clear();
  std::vector<bool> reads(targets.size(), true);
  if (!enabled_) return reads;
  const auto has = [](const std::vector<int>& group, int k) {
    return std::find(group.begin(), group.end(), k) != group.end();
  };
  std::vector<int> node(node_ranks_.size());
  for (size_t k = 0; k < node.size(); ++k) node[k] = static_cast<int>(k);
  const size_t everyone = GroupIndex(std::move(node));  // for full tensors
  for (size_t t = 0; t < targets.size(); ++t) {
    const LocalTarget& target = targets[t];
    if (target.dests.size() != 1) continue;
    const Tensor& dest = target.dests[0];
    if (target.kind == LocalTarget::Kind::kReplace) {
      shares_.push_back(Share{t, everyone, 0, dest.shape(), dest.dtype(), dest.nbytes()});
      continue;
    }
    // A fresh local (on the communicator's device type: enabled_), or the caller's own
    // buffer there (an engine's: read into, then sent from or into, as it is laid out).
    const bool in_place = target.kind == LocalTarget::Kind::kInPlaceDTensor &&
                          dest.device().type == device_type_;
    if (target.kind != LocalTarget::Kind::kFreshDTensor && !in_place) continue;
    const DTensor& d = target.leaf->value->as_dtensor();
    for (const size_t g : GroupsOf(d)) {
      // The group's local shape: this rank's dest when it is in the group, else the layout's
      // for the group's first rank.
      IntVector shape = dest.shape();
      if (!has(groups_[g], node_rank_)) {
        absl::StatusOr<const LocalLayoutCache::Layout*> layout =
            layouts.Get(target.leaf->path, d, node_ranks_[groups_[g][0]]);
        if (!layout.ok()) continue;  // this rank's own layout passed: cannot happen
        shape = (*layout)->info.local_shape;
      }
      int64_t numel = 1;
      for (int64_t s : shape) numel *= s;
      const absl::StatusOr<int64_t> bytes = BytesForElements(dest.dtype(), numel);
      if (!bytes.ok()) continue;
      shares_.push_back(Share{t, g, 0, std::move(shape), dest.dtype(), *bytes});
    }
  }
  // Readers: each group's tensors cut into its ranks' shares of its bytes, in file order.
  std::vector<int64_t> total(groups_.size(), 0);
  std::vector<int64_t> before(groups_.size(), 0);
  for (const Share& share : shares_) total[share.group] += share.bytes;
  received_bytes_ = 0;
  for (Share& share : shares_) {
    const std::vector<int>& group = groups_[share.group];
    const auto ranks = static_cast<int64_t>(group.size());
    // before < total, so the share is below `ranks`; __int128: before x ranks may pass int64.
    share.reader = group[static_cast<size_t>(static_cast<__int128>(before[share.group]) * ranks /
                                             std::max<int64_t>(total[share.group], 1))];
    before[share.group] += share.bytes;
    if (has(group, node_rank_) && share.reader != node_rank_) {
      reads[share.target] = false;
      received_bytes_ += share.bytes;
    }
  }
  return reads;
}

absl::Status NodeReads::Prepare(const std::vector<LocalTarget>& targets, int64_t bucket_bytes) {
  if (!enabled_ || shares_.empty() || node_ == nullptr) return absl::OkStatus();
  // A 1-D mesh of a reader, and of the rest of its group (the node's own numbering).
  absl::flat_hash_map<std::vector<int64_t>, std::shared_ptr<const DeviceMesh>> meshes;
  const auto mesh_of = [&](std::vector<int64_t> ranks)
      -> absl::StatusOr<std::shared_ptr<const DeviceMesh>> {
    auto [it, added] = meshes.try_emplace(ranks);
    if (added) {
      SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create(
                                                 {static_cast<int64_t>(ranks.size())}, ranks));
      it->second = std::make_shared<const DeviceMesh>(std::move(mesh));
    }
    return it->second;
  };
  const std::vector<Placement> replicate = {Placement::Replicate()};
  const absl::Span<TransferTensor> tensors = ReusedDescriptors(shares_.size());
  TransferLocals sources, destinations;
  for (size_t i = 0; i < shares_.size(); ++i) {
    const Share& share = shares_[i];
    const std::vector<int>& group = groups_[share.group];
    std::vector<int64_t> others;
    for (int q : group) {
      if (q != share.reader) others.push_back(q);
    }
    TransferTensor& d = tensors[i];
    d.name = std::string(targets[share.target].leaf->path);
    d.dtype = share.dtype;
    d.shape.assign(share.shape.begin(), share.shape.end());
    SDRT_ASSIGN_OR_RETURN(d.source.mesh, mesh_of({share.reader}));
    d.source.placements = replicate;
    SDRT_ASSIGN_OR_RETURN(d.destination.mesh, mesh_of(std::move(others)));
    d.destination.placements = replicate;
    const bool member = std::find(group.begin(), group.end(), node_rank_) != group.end();
    const absl::Span<const Tensor> mine(&targets[share.target].dests[0], 1);
    const absl::Span<const Tensor> nothing;
    sources.Add(member && share.reader == node_rank_ ? mine : nothing);
    destinations.Add(member && share.reader != node_rank_ ? mine : nothing);
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
