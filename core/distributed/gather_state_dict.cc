// GatherStateDict (core/distributed/distributed_state_dict.h): each DTensor and ShardedTensor
// becomes a transfer into the full tensor on the ranks that keep it (internal/gather_transfer.h,
// the description FullTensor and GatherShardedTensor also use); the ranks agree on the
// skeleton, the options and their exchange counts (core/distributed/agreement.h), the
// transfer engine moves the bytes (internal/engine/transfer.h), and the iteration engine
// rebuilds the tree (ranks_only, cpu_offload and type_check as in every other state-dict
// operation).
#include <algorithm>
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
#include "sdrt/core/distributed/internal/gather_transfer.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/local_target.h"
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
      return internal::CheckShardingCutsWholeBytes(leaf.path, d.dtype(), d.global_shape(), *d.mesh(),
                                         d.placements());
    }
    case ValueKind::kShardedTensor:
      for (const LocalShard& s : v.as_sharded().local_shards()) {
        if (s.tensor.device().is_meta()) {
          return absl::FailedPreconditionError(
              absl::StrCat("'", leaf.path, "': a local shard is on meta (no data to gather)"));
        }
        SDRT_RETURN_IF_ERROR(internal::CheckBoxCutsWholeBytes(leaf.path, v.as_sharded().dtype(),
                                                    v.as_sharded().global_shape(),
                                                    s.metadata.offsets, s.metadata.sizes));
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

}  // namespace

absl::StatusOr<Map> GatherStateDict(const Map& state_dict, const GatherOptions& options) {
  SDRT_ASSIGN_OR_RETURN(Communicator * comm_ptr, internal::ResolveCommunicator(options.comm, kOp));
  Communicator& comm = *comm_ptr;
  TransferStats local_stats;
  TransferStats& stats = options.stats != nullptr ? *options.stats : local_stats;
  stats = TransferStats{};

  // 1. Skeleton and local checks.
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
  MeshCheck mesh_check(comm);
  LocalShapeCheck local_shape_check(comm.rank());
  for (const internal::Leaf& leaf : leaves) {
    if (local_error.ok()) {
      local_error = ValidateLeaf(leaf, comm, options, mesh_check, local_shape_check);
    }
  }

  // 2. The transfer (internal/gather_transfer.h): each DTensor and ShardedTensor, in walk
  // order, into its full tensor on the keeping ranks; planned before the agreement, which
  // carries the exchange counts (or, with ShardedTensors, the boxes).
  internal::GatherTransfer gather(kOp, comm, options.ranks_only, options.bucket_bytes,
                                  options.progress);
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
  // result_keys[k]: the DTensor or ShardedTensor of the k-th gathered leaf in walk order.
  std::vector<const void*> result_keys;
  result_keys.reserve(leaves.size());
  for (const internal::Leaf& leaf : leaves) {
    if (!local_error.ok()) break;
    const Value& v = *leaf.value;
    if (v.kind() == ValueKind::kDTensor) {
      const DTensor& d = v.as_dtensor();
      absl::StatusOr<DeviceMeshComm*> mc = mesh_comm_for(d.mesh());
      if (!mc.ok()) {
        local_error = mc.status();
        break;
      }
      gather.AddDTensor(leaf.path, d, *mc,
                        options.cpu_offload ? Device::CPU()
                                            : options.device.value_or(d.local().device()));
      result_keys.push_back(&d);
    } else if (v.kind() == ValueKind::kShardedTensor) {
      const ShardedTensor& st = v.as_sharded();
      gather.AddSharded(leaf.path, st,
                        options.cpu_offload
                            ? Device::CPU()
                            : options.device.value_or(st.local_shards().empty()
                                                          ? Device::CPU()
                                                          : st.local_shards().front().tensor.device()));
      result_keys.push_back(&st);
    }
  }
  if (local_error.ok()) local_error = gather.Prepare();

  // 3. One agreement (the leaves are hashed; their text is written only if the ranks
  // disagree), then the engine.
  const HashedSkeleton skeleton = internal::HashLeaves(leaves);
  AgreementPayload payload;
  payload.mine = gather.payload();
  SDRT_RETURN_IF_ERROR(
      AgreeAcrossRanksHashed(comm, kOp, shared_options, skeleton, local_error, &stats, &payload));
  SDRT_RETURN_IF_ERROR(gather.Run(kOp, payload.all, &stats));

  // 4. The result tree (excluded ranks: an empty map; nothing more is computed). The walk
  // meets the DTensors and ShardedTensors in the order of `leaves`, so result k is the k-th.
  internal::IterateVisitors visitors = internal::IdentityVisitors();
  size_t next = 0;
  const auto take = [&](const void* key) -> absl::StatusOr<Value> {
    if (next >= result_keys.size() || result_keys[next] != key) {
      return absl::InternalError(absl::StrCat(kOp, ": the result tree walk lost its place"));
    }
    return Value(std::move(gather.result(next++)));
  };
  if (gather.keeps()) {
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
