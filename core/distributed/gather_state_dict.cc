// GatherStateDict (core/distributed/distributed_state_dict.h): plan every collective from the
// agreed skeleton, gather the shards of consecutive tensors bucket by bucket with one
// all-gather-v each, then rebuild the tree with the iteration engine (ranks_only,
// cpu_offload and type_check as in every other state-dict operation).
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/buckets.h"
#include "sdrt/core/distributed/internal/default_comm.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "GatherStateDict";

// One rank's shards of a ShardedTensor leaf: offsets and sizes, in local shard order.
struct ShardBoxes {
  std::vector<IntVector> offsets;
  std::vector<IntVector> sizes;
};

// A leaf whose full tensor needs the all-gather.
struct Item {
  const Value* leaf = nullptr;
  DType dtype = DType::kFloat32;
  IntVector global_shape;
  Device target = Device::CPU();
  // DTensor: the (Partial-reduced) local tensor and each rank's owned runs; a rank that
  // only holds a copy contributes nothing.
  Tensor local;
  std::vector<std::optional<ShardRuns>> rank_runs;
  std::vector<IntVector> rank_local_shapes;
  // ShardedTensor: every rank's boxes.
  std::vector<ShardBoxes> rank_boxes;
  // Per rank, the bytes it contributes (unpadded).
  std::vector<int64_t> rank_bytes;
};

bool IsCopyRank(const DeviceMesh& mesh, const std::vector<Placement>& placements, int q) {
  const IntVector coord = *mesh.Coordinate(q);
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_shard_like() && coord[i] != 0) return true;
  }
  return false;
}

absl::Status ValidateLeaf(const internal::Leaf& leaf, const Communicator& comm,
                          const GatherOptions& options) {
  const Value& v = *leaf.value;
  switch (v.kind()) {
    case ValueKind::kDTensor: {
      const DTensor& d = v.as_dtensor();
      if (d.mesh() == nullptr || d.mesh()->num_ranks() != comm.size() ||
          !d.mesh()->Coordinate(comm.rank()).has_value()) {
        return absl::InvalidArgumentError(absl::StrCat("'", leaf.path, "': ", d.ToString(),
                                                       " is not on a mesh of the communicator's ",
                                                       comm.size(), " ranks"));
      }
      for (int64_t r : d.mesh()->ranks()) {
        if (r < 0 || r >= comm.size()) {
          return absl::InvalidArgumentError(absl::StrCat("'", leaf.path, "': mesh ",
                                                         d.mesh()->ToString(), " holds rank ", r,
                                                         " outside the communicator"));
        }
      }
      if (d.local().device().is_meta()) {
        return absl::FailedPreconditionError(
            absl::StrCat("'", leaf.path, "': the local tensor is on meta (no data to gather)"));
      }
      return ValidateLocalShape(d.local().shape(), d.global_shape(), *d.mesh(), d.placements(),
                                comm.rank(), leaf.path);
    }
    case ValueKind::kShardedTensor:
      for (const LocalShard& s : v.as_sharded().local_shards()) {
        if (s.tensor.device().is_meta()) {
          return absl::FailedPreconditionError(
              absl::StrCat("'", leaf.path, "': a local shard is on meta (no data to gather)"));
        }
      }
      return absl::OkStatus();
    case ValueKind::kTensor:
      if (options.cpu_offload && v.as_tensor().device().is_meta()) {
        return absl::FailedPreconditionError(
            absl::StrCat("'", leaf.path, "': a meta tensor has no data to offload"));
      }
      return absl::OkStatus();
    case ValueKind::kOpaque:
      if (options.type_check && v.as_opaque().type_name != internal::kBytesIOTypeName) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", leaf.path, "': unexpected value type ", v.as_opaque().type_name));
      }
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
}

// One AllGatherBytes of every ShardedTensor leaf's local shard boxes; fills rank_boxes
// and checks the boxes fit (the same verdict on every rank).
absl::Status ExchangeShardBoxes(Communicator& comm, std::vector<Item*>& items,
                                CollectiveStats& stats) {
  std::vector<int64_t> message;
  for (const Item* item : items) {
    const ShardedTensor& st = item->leaf->as_sharded();
    message.push_back(static_cast<int64_t>(st.local_shards().size()));
    for (const LocalShard& s : st.local_shards()) {
      message.insert(message.end(), s.metadata.offsets.begin(), s.metadata.offsets.end());
      message.insert(message.end(), s.metadata.sizes.begin(), s.metadata.sizes.end());
    }
  }
  std::string bytes(message.size() * sizeof(int64_t), '\0');
  if (!message.empty()) std::memcpy(bytes.data(), message.data(), bytes.size());
  ++stats.collectives;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all, comm.AllGatherBytes(bytes));
  for (Item* item : items) {
    item->rank_boxes.assign(static_cast<size_t>(comm.size()), {});
    item->rank_bytes.assign(static_cast<size_t>(comm.size()), 0);
  }
  for (int q = 0; q < comm.size(); ++q) {
    std::vector<int64_t> m(all[q].size() / sizeof(int64_t));
    if (!m.empty()) std::memcpy(m.data(), all[q].data(), m.size() * sizeof(int64_t));
    size_t at = 0;
    for (Item* item : items) {
      const size_t ndim = item->global_shape.size();
      const int64_t n = m[at++];
      for (int64_t s = 0; s < n; ++s) {
        IntVector offsets(m.begin() + at, m.begin() + at + ndim);
        IntVector sizes(m.begin() + at + ndim, m.begin() + at + 2 * ndim);
        at += 2 * ndim;
        int64_t numel = 1;
        for (size_t d = 0; d < ndim; ++d) {
          numel *= sizes[d];
          if (sizes[d] < 0 || offsets[d] < 0 ||
              (sizes[d] > 0 && offsets[d] + sizes[d] > item->global_shape[d])) {
            return absl::InvalidArgumentError(
                absl::StrCat(kOp, ": a shard of rank ", q, " at offsets ", ShapeToString(offsets),
                             " with sizes ", ShapeToString(sizes), " does not fit in ",
                             ShapeToString(item->global_shape)));
          }
        }
        item->rank_bytes[q] += numel * ElementSize(item->dtype);
        item->rank_boxes[q].offsets.push_back(std::move(offsets));
        item->rank_boxes[q].sizes.push_back(std::move(sizes));
      }
    }
  }
  return absl::OkStatus();
}

// Gathers the items of one bucket (one AllGatherV) and, when `keep`, writes each full
// tensor into results.
absl::Status GatherBucket(Communicator& comm, absl::Span<Item* const> bucket, bool keep,
                          std::vector<Tensor>& fulls, CollectiveStats& stats) {
  const int size = comm.size();
  // Byte layout: rank q's segment holds its pieces of the bucket's items, each padded.
  std::vector<std::vector<int64_t>> piece_offset(bucket.size(), std::vector<int64_t>(size));
  std::vector<int64_t> counts(static_cast<size_t>(size), 0);
  for (int q = 0; q < size; ++q) {
    for (size_t i = 0; i < bucket.size(); ++i) {
      piece_offset[i][q] = counts[q];
      counts[q] += internal::AlignUp(bucket[i]->rank_bytes[q]);
    }
  }
  std::vector<int64_t> rank_base(static_cast<size_t>(size), 0);
  int64_t total = 0;
  for (int q = 0; q < size; ++q) {
    rank_base[q] = total;
    total += counts[q];
  }
  const Device device = comm.device();
  const int me = comm.rank();
  SDRT_ASSIGN_OR_RETURN(Tensor send, Tensor::Empty({counts[me]}, DType::kUInt8, device));
  for (size_t i = 0; i < bucket.size(); ++i) {
    const Item& item = *bucket[i];
    if (item.rank_bytes[me] == 0) continue;
    if (item.leaf->kind() == ValueKind::kDTensor) {
      SDRT_ASSIGN_OR_RETURN(Tensor dst, internal::ByteView(send, piece_offset[i][me], item.dtype,
                                                           item.local.shape()));
      SDRT_RETURN_IF_ERROR(dst.CopyFrom(item.local));
    } else {
      int64_t at = piece_offset[i][me];
      for (const LocalShard& s : item.leaf->as_sharded().local_shards()) {
        SDRT_ASSIGN_OR_RETURN(Tensor dst,
                              internal::ByteView(send, at, item.dtype, s.tensor.shape()));
        SDRT_RETURN_IF_ERROR(dst.CopyFrom(s.tensor));
        at += dst.nbytes();
      }
    }
  }
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, DType::kUInt8, device));
  ++stats.collectives;
  ++stats.data_collectives;
  ++stats.buckets;
  stats.bytes += total;
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, send, counts));
  if (!keep) return absl::OkStatus();

  for (size_t i = 0; i < bucket.size(); ++i) {
    const Item& item = *bucket[i];
    const bool dtensor = item.leaf->kind() == ValueKind::kDTensor;
    Tensor full;
    if (dtensor) {
      SDRT_ASSIGN_OR_RETURN(full, Tensor::Empty(item.global_shape, item.dtype, item.target));
    } else {
      SDRT_ASSIGN_OR_RETURN(full, Tensor::Zeros(item.global_shape, item.dtype, item.target));
    }
    const IntVector origin(item.global_shape.size(), 0);
    for (int q = 0; q < size; ++q) {
      if (item.rank_bytes[q] == 0) continue;
      const int64_t base = rank_base[q] + piece_offset[i][q];
      if (dtensor) {
        SDRT_ASSIGN_OR_RETURN(const Tensor piece, internal::ByteView(gathered, base, item.dtype,
                                                                     item.rank_local_shapes[q]));
        SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, piece, *item.rank_runs[q], /*to_local=*/false));
      } else {
        int64_t at = base;
        const ShardBoxes& boxes = item.rank_boxes[q];
        for (size_t s = 0; s < boxes.sizes.size(); ++s) {
          SDRT_ASSIGN_OR_RETURN(const Tensor piece,
                                internal::ByteView(gathered, at, item.dtype, boxes.sizes[s]));
          at += piece.nbytes();
          SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, piece,
                                        BoxRuns(boxes.offsets[s], boxes.sizes[s]),
                                        /*to_local=*/false));
        }
      }
    }
    fulls[i] = std::move(full);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Map> GatherStateDict(const Map& state_dict, const GatherOptions& options) {
  SDRT_ASSIGN_OR_RETURN(Communicator * comm_ptr, internal::ResolveCommunicator(options.comm, kOp));
  Communicator& comm = *comm_ptr;
  CollectiveStats local_stats;
  CollectiveStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = CollectiveStats{};
  const bool keep = options.ranks_only.empty() ||
                    std::find(options.ranks_only.begin(), options.ranks_only.end(), comm.rank()) !=
                        options.ranks_only.end();

  // 1. Skeleton and local checks, then agreement (one collective).
  absl::StatusOr<std::vector<internal::Leaf>> leaves_or = internal::CollectLeaves(state_dict);
  absl::Status local_error = leaves_or.status();
  std::vector<internal::Leaf> leaves;
  if (leaves_or.ok()) leaves = *std::move(leaves_or);
  if (local_error.ok() && options.bucket_bytes < 1) {
    local_error = absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes must be at least 1, got ", options.bucket_bytes));
  }
  // The options every rank must share go first, so that a difference is an error on every
  // rank rather than mismatched collectives.
  internal::Skeleton skeleton;
  skeleton.reserve(leaves.size() + 1);
  skeleton.emplace_back("<options>",
                        absl::StrCat("bucket_bytes ", options.bucket_bytes, ", ranks_only [",
                                     absl::StrJoin(options.ranks_only, ", "), "], cpu_offload ",
                                     options.cpu_offload ? "true" : "false"));
  for (const internal::Leaf& leaf : leaves) {
    skeleton.emplace_back(leaf.path, internal::DescribeForAgreement(*leaf.value));
    if (local_error.ok()) local_error = ValidateLeaf(leaf, comm, options);
  }
  SDRT_RETURN_IF_ERROR(internal::AgreeAcrossRanks(comm, kOp, skeleton, local_error, &stats));

  // 2. The items to gather, in leaf order; Partial mesh dims reduced first.
  std::vector<Item> items;
  items.reserve(leaves.size());
  absl::flat_hash_map<const void*, Value> results;
  std::vector<std::pair<std::shared_ptr<const DeviceMesh>, std::unique_ptr<DeviceMeshComm>>>
      mesh_comms;
  const auto mesh_comm_for =
      [&](const std::shared_ptr<const DeviceMesh>& mesh) -> absl::StatusOr<DeviceMeshComm*> {
    for (auto& [m, mc] : mesh_comms) {
      if (*m == *mesh) return mc.get();
    }
    SDRT_ASSIGN_OR_RETURN(DeviceMeshComm mc, DeviceMeshComm::Create(mesh, comm));
    mesh_comms.emplace_back(mesh, std::make_unique<DeviceMeshComm>(std::move(mc)));
    return mesh_comms.back().second.get();
  };
  for (const internal::Leaf& leaf : leaves) {
    const Value& v = *leaf.value;
    if (v.kind() == ValueKind::kDTensor) {
      const DTensor& d = v.as_dtensor();
      const DeviceMesh& mesh = *d.mesh();
      const std::vector<Placement>& placements = d.placements();
      Tensor local = d.local();
      SDRT_ASSIGN_OR_RETURN(const std::vector<int> order, MeshDimsToReplicate(mesh, placements));
      bool reduced = false;
      for (int i : order) {
        if (!placements[i].is_partial()) continue;
        if (!reduced) {
          // The reduction runs on the communicator's device, in a copy.
          SDRT_ASSIGN_OR_RETURN(local, Tensor::Empty(d.local().shape(), d.dtype(), comm.device()));
          SDRT_RETURN_IF_ERROR(local.CopyFrom(d.local()));
          reduced = true;
        }
        SDRT_ASSIGN_OR_RETURN(DeviceMeshComm * mc, mesh_comm_for(d.mesh()));
        SDRT_ASSIGN_OR_RETURN(Communicator * dim_comm, mc->DimComm(i));
        ++stats.collectives;
        SDRT_RETURN_IF_ERROR(dim_comm->AllReduce(local, placements[i].reduce_op()));
      }
      const Device target =
          options.cpu_offload ? Device::CPU() : options.device.value_or(d.local().device());
      if (NumShards(mesh, placements) == 1) {
        if (keep) {
          if (reduced || local.device() != target) {
            SDRT_ASSIGN_OR_RETURN(Tensor moved, local.To(target));
            local = std::move(moved);
          }
          results[&d] = Value(local);
        }
        continue;
      }
      Item item;
      item.leaf = &v;
      item.dtype = d.dtype();
      item.global_shape = d.global_shape();
      item.target = target;
      item.local = local;
      item.rank_runs.resize(static_cast<size_t>(comm.size()));
      item.rank_local_shapes.resize(static_cast<size_t>(comm.size()));
      item.rank_bytes.assign(static_cast<size_t>(comm.size()), 0);
      for (int q = 0; q < comm.size(); ++q) {
        if (IsCopyRank(mesh, placements, q)) continue;
        SDRT_ASSIGN_OR_RETURN(
            const LocalShardInfo info,
            ComputeLocalShapeAndGlobalOffset(d.global_shape(), mesh, placements, q));
        int64_t numel = 1;
        for (int64_t s : info.local_shape) numel *= s;
        item.rank_bytes[q] = numel * ElementSize(d.dtype());
        item.rank_local_shapes[q] = info.local_shape;
        item.rank_runs[q] = OwnedRuns(info);
      }
      items.push_back(std::move(item));
    } else if (v.kind() == ValueKind::kShardedTensor) {
      const ShardedTensor& st = v.as_sharded();
      Item item;
      item.leaf = &v;
      item.dtype = st.dtype();
      item.global_shape = st.global_shape();
      item.target = options.cpu_offload
                        ? Device::CPU()
                        : options.device.value_or(st.local_shards().empty()
                                                      ? Device::CPU()
                                                      : st.local_shards().front().tensor.device());
      items.push_back(std::move(item));
    }
  }
  std::vector<Item*> sharded_items;
  for (Item& item : items) {
    if (item.leaf->kind() == ValueKind::kShardedTensor) sharded_items.push_back(&item);
  }
  if (!sharded_items.empty()) SDRT_RETURN_IF_ERROR(ExchangeShardBoxes(comm, sharded_items, stats));

  // 3. Buckets of consecutive items, at most bucket_bytes gathered each (one item alone
  // may exceed it).
  std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) of items
  int64_t total_bytes = 0;
  for (size_t begin = 0; begin < items.size();) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < items.size()) {
      int64_t item_bytes = 0;
      for (int64_t b : items[end].rank_bytes) item_bytes += internal::AlignUp(b);
      if (end > begin && bytes + item_bytes > options.bucket_bytes) break;
      bytes += item_bytes;
      ++end;
    }
    ranges.emplace_back(begin, end);
    total_bytes += bytes;
    begin = end;
  }
  for (const auto& [begin, end] : ranges) {
    std::vector<Item*> bucket;
    for (size_t i = begin; i < end; ++i) bucket.push_back(&items[i]);
    std::vector<Tensor> fulls(bucket.size());
    SDRT_RETURN_IF_ERROR(GatherBucket(comm, bucket, keep, fulls, stats));
    if (keep) {
      for (size_t i = 0; i < bucket.size(); ++i) {
        const Value& leaf = *bucket[i]->leaf;
        const void* key = leaf.kind() == ValueKind::kDTensor
                              ? static_cast<const void*>(&leaf.as_dtensor())
                              : static_cast<const void*>(&leaf.as_sharded());
        results[key] = Value(std::move(fulls[i]));
      }
    }
    if (options.progress) options.progress(stats.bytes, total_bytes);
  }

  // 4. The result tree (excluded ranks: an empty map; nothing more is computed).
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  if (keep) {
    visitors.dtensor = [&results](const DTensor& d, const Value*) -> absl::StatusOr<Value> {
      return results.at(&d);
    };
    visitors.sharded = [&results](const ShardedTensor& st, const Value*) -> absl::StatusOr<Value> {
      return results.at(&st);
    };
  }
  internal::IterateOptions iterate;
  iterate.rank = comm.rank();
  iterate.ranks_only = options.ranks_only;
  iterate.cpu_offload = options.cpu_offload;
  iterate.type_check = options.type_check;
  return internal::IterateStateDict(state_dict, visitors, nullptr, iterate);
}

}  // namespace sdrt
