// GatherStateDict (core/distributed/distributed_state_dict.h): agree on the skeleton and the
// options (core/distributed/agreement.h), make the gather plan's items and buckets from the
// agreed skeleton (internal/gather_plan.h, the plan FullTensor and GatherShardedTensor
// also use), gather bucket by bucket with one all-gather-v each, then rebuild the tree
// with the iteration engine (ranks_only, cpu_offload and type_check as in every other
// state-dict operation).
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
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/internal/agreement.h"
#include "sdrt/core/distributed/internal/default_comm.h"
#include "sdrt/core/distributed/internal/fresh_arena.h"
#include "sdrt/core/distributed/internal/gather_exchange.h"
#include "sdrt/core/distributed/internal/gather_plan.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/partial_buckets.h"
#include "sdrt/core/state_dict/iterate.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr absl::string_view kOp = "GatherStateDict";

// Whether a mesh spans the communicator: checked once per mesh object of a call.
class MeshCheck {
 public:
  explicit MeshCheck(const Communicator& comm) : comm_(comm) {}

  absl::Status operator()(absl::string_view path, const DTensor& d) {
    if (d.mesh() != nullptr && d.mesh().get() == last_) return absl::OkStatus();
    if (d.mesh() == nullptr || d.mesh()->num_ranks() != comm_.size() ||
        !d.mesh()->Coordinate(comm_.rank()).has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("'", path, "': ", d.ToString(),
                                                     " is not on a mesh of the communicator's ",
                                                     comm_.size(), " ranks"));
    }
    for (int64_t r : d.mesh()->ranks()) {
      if (r < 0 || r >= comm_.size()) {
        return absl::InvalidArgumentError(absl::StrCat("'", path, "': mesh ", d.mesh()->ToString(),
                                                       " holds rank ", r,
                                                       " outside the communicator"));
      }
    }
    last_ = d.mesh().get();
    return absl::OkStatus();
  }

 private:
  const Communicator& comm_;
  const DeviceMesh* last_ = nullptr;
};

// ValidateLocalShape with the expected local shape computed once per (mesh, placements,
// global shape) of a call: most leaves share a few (Llama's 291 tensors have 9). A local
// shape that differs, or a case the cache does not hold, goes to ValidateLocalShape itself,
// so the outcome and the error are its own.
class LocalShapeCheck {
 public:
  explicit LocalShapeCheck(int rank) : rank_(rank) {}

  absl::Status operator()(absl::string_view path, const DTensor& d) {
    std::vector<Entry>& slot = entries_[internal::HashLayout(d)];
    const Entry* entry = nullptr;
    for (const Entry& e : slot) {
      if (e.mesh == d.mesh().get() && e.global_shape == d.global_shape() &&
          e.placements == d.placements()) {
        entry = &e;
        break;
      }
    }
    if (entry == nullptr && d.mesh()->Coordinate(rank_).has_value()) {
      absl::StatusOr<IntVector> expected =
          ComputeLocalShape(d.global_shape(), *d.mesh(), d.placements(), rank_);
      if (expected.ok()) {
        slot.push_back({d.mesh().get(), d.placements(), d.global_shape(), *std::move(expected)});
        entry = &slot.back();
      }
    }
    if (entry != nullptr && entry->local_shape == d.local().shape()) return absl::OkStatus();
    return ValidateLocalShape(d.local().shape(), d.global_shape(), *d.mesh(), d.placements(), rank_,
                              path);
  }

 private:
  struct Entry {
    const DeviceMesh* mesh;
    std::vector<Placement> placements;
    IntVector global_shape;
    IntVector local_shape;
  };
  int rank_;
  absl::flat_hash_map<uint64_t, std::vector<Entry>> entries_;
};

absl::Status ValidateLeaf(const internal::Leaf& leaf, const Communicator& comm,
                          const GatherOptions& options, MeshCheck& mesh_check,
                          LocalShapeCheck& local_shape_check) {
  const Value& v = *leaf.value;
  switch (v.kind()) {
    case ValueKind::kDTensor: {
      const DTensor& d = v.as_dtensor();
      SDRT_RETURN_IF_ERROR(mesh_check(leaf.path, d));
      if (d.local().device().is_meta()) {
        return absl::FailedPreconditionError(
            absl::StrCat("'", leaf.path, "': the local tensor is on meta (no data to gather)"));
      }
      SDRT_RETURN_IF_ERROR(local_shape_check(leaf.path, d));
      return internal::CheckShardingCutsWholeBytes(leaf.path, d.dtype(), d.global_shape(),
                                                   *d.mesh(), d.placements());
    }
    case ValueKind::kShardedTensor:
      for (const LocalShard& s : v.as_sharded().local_shards()) {
        if (s.tensor.device().is_meta()) {
          return absl::FailedPreconditionError(
              absl::StrCat("'", leaf.path, "': a local shard is on meta (no data to gather)"));
        }
        SDRT_RETURN_IF_ERROR(internal::CheckBoxCutsWholeBytes(
            leaf.path, v.as_sharded().dtype(), v.as_sharded().global_shape(), s.metadata.offsets,
            s.metadata.sizes));
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

// The full tensors of the items made on the CPU, as views of one arena (zeroed where a
// ShardedTensor's elements may be left uncovered); the others stay undefined for
// GatherBucket to allocate.
absl::Status AllocateCpuFulls(const std::vector<internal::GatherItem>& items,
                              std::vector<Tensor>& fulls) {
  std::vector<internal::FreshPiece> pieces;
  std::vector<size_t> owners;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].target.is_cpu()) continue;
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(items[i].global_shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(items[i].dtype, numel));
    pieces.push_back({bytes, ElementAlignment(items[i].dtype)});
    owners.push_back(i);
  }
  if (pieces.empty()) return absl::OkStatus();
  SDRT_ASSIGN_OR_RETURN(const internal::FreshLayout layout, internal::LayOutFresh(pieces));
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> arena, Storage::AllocateCpu(layout.bytes));
  for (size_t k = 0; k < owners.size(); ++k) {
    const internal::GatherItem& item = items[owners[k]];
    SDRT_ASSIGN_OR_RETURN(fulls[owners[k]], Tensor::AtByteOffset(arena, layout.offsets[k],
                                                                 item.dtype, item.global_shape));
    if (item.zero_fill && pieces[k].bytes > 0) {
      std::memset(fulls[owners[k]].data_ptr(), 0, static_cast<size_t>(pieces[k].bytes));
    }
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
  absl::StatusOr<internal::Leaves> leaves_or = internal::CollectLeaves(state_dict);
  absl::Status local_error = leaves_or.status();
  internal::Leaves leaves;
  if (leaves_or.ok()) leaves = *std::move(leaves_or);
  if (local_error.ok() && options.bucket_bytes < 1) {
    local_error = absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes must be at least 1, got ", options.bucket_bytes));
  }
  // The options that shape the collectives must be every rank's, or the ranks would issue
  // mismatched collectives.
  const std::string shared_options =
      absl::StrCat("bucket_bytes ", options.bucket_bytes, ", ranks_only [",
                   absl::StrJoin(options.ranks_only, ", "), "], cpu_offload ",
                   options.cpu_offload ? "true" : "false");
  // The leaves are hashed; their text is written only if the ranks disagree.
  MeshCheck mesh_check(comm);
  LocalShapeCheck local_shape_check(comm.rank());
  for (const internal::Leaf& leaf : leaves) {
    if (local_error.ok()) {
      local_error = ValidateLeaf(leaf, comm, options, mesh_check, local_shape_check);
    }
  }
  const HashedSkeleton skeleton = internal::HashLeaves(leaves);
  SDRT_RETURN_IF_ERROR(
      AgreeAcrossRanksHashed(comm, kOp, shared_options, skeleton, local_error, &stats));

  // 2. The items to gather, in leaf order (internal/gather_plan.h); Partial mesh dims
  // reduced first, on the communicator's device, where the buckets are. results[k] is the
  // full tensor of the k-th DTensor or ShardedTensor leaf in walk order (the order the
  // result tree is rebuilt in), item_slot[i] the k of item i.
  std::vector<internal::GatherItem> items;
  std::vector<size_t> item_slot;
  items.reserve(leaves.size());
  item_slot.reserve(leaves.size());
  std::vector<Value> results;
  std::vector<const void*> result_keys;  // the DTensor or ShardedTensor of each result
  results.reserve(leaves.size());
  result_keys.reserve(leaves.size());
  std::vector<std::pair<std::shared_ptr<const DeviceMesh>, std::unique_ptr<DeviceMeshComm>>>
      mesh_comms;
  const auto mesh_comm_for =
      [&](const std::shared_ptr<const DeviceMesh>& mesh) -> absl::StatusOr<DeviceMeshComm*> {
    for (auto& [m, mc] : mesh_comms) {
      if (m == mesh || *m == *mesh) return mc.get();
    }
    SDRT_ASSIGN_OR_RETURN(DeviceMeshComm mc, DeviceMeshComm::Create(mesh, comm));
    mesh_comms.emplace_back(mesh, std::make_unique<DeviceMeshComm>(std::move(mc)));
    return mesh_comms.back().second.get();
  };
  // The DTensors' Partial mesh dims, all-reduced in buckets (internal/partial_buckets.h).
  std::vector<internal::PartialInput> partial_inputs;
  partial_inputs.reserve(leaves.size());
  for (const internal::Leaf& leaf : leaves) {
    if (leaf.value->kind() != ValueKind::kDTensor) continue;
    const DTensor& d = leaf.value->as_dtensor();
    SDRT_ASSIGN_OR_RETURN(DeviceMeshComm * mc, mesh_comm_for(d.mesh()));
    partial_inputs.push_back({&d, mc});
  }
  SDRT_ASSIGN_OR_RETURN(std::vector<Tensor> reduced,
                        internal::ReducePartialsInBuckets(partial_inputs, comm.device(),
                                                          options.bucket_bytes, &stats));
  bool any_sharded = false;
  size_t next_dtensor = 0;
  internal::GatherLayoutCache layouts;
  for (const internal::Leaf& leaf : leaves) {
    const Value& v = *leaf.value;
    if (v.kind() == ValueKind::kDTensor) {
      const DTensor& d = v.as_dtensor();
      const Device target =
          options.cpu_offload ? Device::CPU() : options.device.value_or(d.local().device());
      const size_t k = next_dtensor++;
      const Tensor& local = k < reduced.size() && reduced[k].defined() ? reduced[k] : d.local();
      result_keys.push_back(&d);
      results.emplace_back();
      if (NumShards(*d.mesh(), d.placements()) == 1) {
        if (keep && local.device() != target) {
          SDRT_ASSIGN_OR_RETURN(Tensor moved, local.To(target));
          results.back() = Value(std::move(moved));
        } else if (keep) {
          results.back() = Value(local);
        }
        continue;
      }
      SDRT_ASSIGN_OR_RETURN(
          internal::GatherItem item,
          internal::MakeDTensorItem(d, local, comm.size(), comm.rank(), target, &layouts));
      items.push_back(std::move(item));
      item_slot.push_back(results.size() - 1);
    } else if (v.kind() == ValueKind::kShardedTensor) {
      const ShardedTensor& st = v.as_sharded();
      const Device target =
          options.cpu_offload
              ? Device::CPU()
              : options.device.value_or(st.local_shards().empty()
                                            ? Device::CPU()
                                            : st.local_shards().front().tensor.device());
      items.push_back(internal::MakeShardedItem(st, target));
      result_keys.push_back(&st);
      results.emplace_back();
      item_slot.push_back(results.size() - 1);
      any_sharded = true;
    }
  }
  if (any_sharded) {
    std::vector<internal::GatherItem*> all(items.size());
    for (size_t i = 0; i < items.size(); ++i) all[i] = &items[i];
    SDRT_RETURN_IF_ERROR(internal::ExchangeShardBoxes(comm, kOp, all, nullptr, &stats));
  }

  // 3. The full tensors made on the CPU share one allocation (one arena for the call, not
  // one allocation per tensor); buckets of consecutive items, at most bucket_bytes
  // gathered each (one item alone may exceed it), each one collective: on a CPU
  // communicator a grouped exchange that moves pieces straight into place and only to the
  // ranks that keep (internal/gather_exchange.h), else an all-gather-v of packed pieces.
  // With cpu_offload on a GPU communicator each bucket comes to the host through one pinned
  // buffer, reused from bucket to bucket (internal::GatherBucket).
  std::vector<Tensor> fulls(items.size());
  if (keep) SDRT_RETURN_IF_ERROR(AllocateCpuFulls(items, fulls));
  std::vector<bool> keeps(static_cast<size_t>(comm.size()), options.ranks_only.empty());
  for (int r : options.ranks_only) {
    if (r >= 0 && r < comm.size()) keeps[static_cast<size_t>(r)] = true;
  }
  const int64_t total_bytes = internal::GatheredBytes(items);
  std::shared_ptr<Storage> pinned_staging;
  const auto buckets = internal::BucketItems(items, options.bucket_bytes);
  std::vector<internal::GatherItem*> bucket;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const auto [begin, end] = buckets[b];
    bucket.clear();
    for (size_t i = begin; i < end; ++i) bucket.push_back(&items[i]);
    const absl::Span<Tensor> bucket_fulls = absl::MakeSpan(fulls).subspan(begin, end - begin);
    absl::Status gathered =
        internal::CanExchangeBucket(comm, bucket)
            ? internal::GatherBucketByExchange(comm, bucket, keeps, bucket_fulls, &stats)
            : internal::GatherBucket(comm, bucket, comm.device(), keep, bucket_fulls, &stats,
                                     &pinned_staging);
    if (!gathered.ok()) {
      // Which bucket, so that a timeout or a failed rank can be placed in the run.
      return absl::Status(gathered.code(),
                          absl::StrCat("bucket ", b + 1, " of ", buckets.size(), " (", end - begin,
                                       " tensors): ", gathered.message()));
    }
    if (keep) {
      for (size_t i = begin; i < end; ++i) {
        results[item_slot[i]] = Value(std::move(fulls[i]));
      }
    }
    if (options.progress) options.progress(stats.bytes, total_bytes);
  }

  // 4. The result tree (excluded ranks: an empty map; nothing more is computed). The walk
  // meets the DTensors and ShardedTensors in the order of `leaves`, so result k is the k-th.
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  size_t next = 0;
  const auto take = [&](const void* key) -> absl::StatusOr<Value> {
    if (next >= results.size() || result_keys[next] != key) {
      return absl::InternalError(absl::StrCat(kOp, ": the result tree walk lost its place"));
    }
    return std::move(results[next++]);
  };
  if (keep) {
    visitors.dtensor = [&take](const DTensor& d, const Value*) { return take(&d); };
    visitors.sharded = [&take](const ShardedTensor& st, const Value*) { return take(&st); };
  }
  internal::IterateOptions iterate;
  iterate.rank = comm.rank();
  iterate.ranks_only = options.ranks_only;
  iterate.cpu_offload = options.cpu_offload;
  iterate.type_check = options.type_check;
  return internal::IterateStateDict(state_dict, visitors, nullptr, iterate);
}

}  // namespace sdrt
