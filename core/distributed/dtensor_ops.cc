#include "sdrt/core/distributed/dtensor_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/internal/gather_plan.h"
#include "sdrt/core/distributed/internal/partial_buckets.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

std::string EncodeInts(const std::vector<int64_t>& values) {
  std::string bytes(values.size() * sizeof(int64_t), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<int64_t> DecodeInts(const std::string& bytes) {
  std::vector<int64_t> values(bytes.size() / sizeof(int64_t));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(int64_t));
  return values;
}

// InvalidArgument naming `op` unless `t` is on a device `comm` serves: its own device, or
// the CPU (the MPI backend's device; staged by the NCCL backend).
absl::Status CheckServedDevice(absl::string_view op, absl::string_view what, const Tensor& t,
                               const Communicator& comm) {
  if (t.device() == comm.device() || t.device().is_cpu()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", what, " ", t.ToString(), " is on ", t.device().ToString(), ", which the ",
      comm.backend(), " communicator (on ", comm.device().ToString(), ") does not serve"));
}

}  // namespace

absl::StatusOr<Tensor> FullTensor(const DTensor& dtensor, DeviceMeshComm& mesh_comm) {
  const DeviceMesh& mesh = *mesh_comm.mesh();
  if (dtensor.mesh() == nullptr || *dtensor.mesh() != mesh) {
    return absl::InvalidArgumentError(
        absl::StrCat("FullTensor: ", dtensor.ToString(), " is not on ", mesh.ToString()));
  }
  Communicator& comm = mesh_comm.comm();
  SDRT_RETURN_IF_ERROR(CheckServedDevice("FullTensor", "the local tensor", dtensor.local(), comm));
  const std::vector<Placement>& placements = dtensor.placements();
  const IntVector& global_shape = dtensor.global_shape();
  SDRT_RETURN_IF_ERROR(
      ValidateLocalShape(dtensor.local().shape(), global_shape, mesh, placements, comm.rank()));
  SDRT_RETURN_IF_ERROR(
      internal::CheckShardingCutsWholeBytes("", dtensor.dtype(), global_shape, mesh, placements));
  SDRT_ASSIGN_OR_RETURN(const std::vector<int> order, MeshDimsToReplicate(mesh, placements));
  if (order.empty()) return dtensor.local();

  // One item, one bucket, both on the local's device (internal/gather_plan.h).
  const Device device = dtensor.local().device();
  const internal::PartialInput input{&dtensor, &mesh_comm};
  SDRT_ASSIGN_OR_RETURN(std::vector<Tensor> reduced,
                        internal::ReducePartialsInBuckets(
                            {&input, 1}, device, std::numeric_limits<int64_t>::max(), nullptr));
  const Tensor local =
      !reduced.empty() && reduced[0].defined() ? std::move(reduced[0]) : dtensor.local();
  if (NumShards(mesh, placements) == 1) return local;
  SDRT_ASSIGN_OR_RETURN(
      internal::GatherItem item,
      internal::MakeDTensorItem(dtensor, local, comm.size(), comm.rank(), device));
  std::vector<Tensor> full(1);
  internal::GatherItem* const bucket[] = {&item};
  SDRT_RETURN_IF_ERROR(
      internal::GatherBucket(comm, bucket, device, /*keep=*/true, absl::MakeSpan(full), nullptr));
  return full[0];
}

absl::StatusOr<DTensor> FromLocal(const Tensor& local, std::shared_ptr<const DeviceMesh> mesh,
                                  const std::vector<Placement>& placements, Communicator& comm,
                                  const std::optional<IntVector>& global_shape,
                                  absl::string_view name) {
  if (mesh == nullptr) return absl::InvalidArgumentError("FromLocal: null mesh");
  const std::string who = name.empty() ? "FromLocal" : absl::StrCat("FromLocal '", name, "'");
  if (mesh->num_ranks() != comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", mesh->ToString(), " has ", mesh->num_ranks(),
                     " ranks but the communicator has ", comm.size()));
  }
  // Message: [local rank, has global shape, local shape..., global shape...].
  std::vector<int64_t> message = {local.dim(), global_shape.has_value() ? 1 : 0};
  message.insert(message.end(), local.shape().begin(), local.shape().end());
  if (global_shape.has_value()) {
    message.insert(message.end(), global_shape->begin(), global_shape->end());
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                        comm.AllGatherBytes(EncodeInts(message)));
  std::vector<IntVector> shapes;
  for (int q = 0; q < comm.size(); ++q) {
    const std::vector<int64_t> m = DecodeInts(all[q]);
    if (m[0] != local.dim() || m[1] != message[1] ||
        (m[1] == 1 &&
         !std::equal(m.begin() + 2 + m[0], m.end(), global_shape->begin(), global_shape->end()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": rank ", q, " passed a local tensor of rank ", m[0],
          m[1] == 1
              ? absl::StrCat(" and global shape ", ShapeToString(IntSpan(m).subspan(2 + m[0])))
              : " and no global shape",
          " but rank ", comm.rank(), " a local tensor of rank ", local.dim(),
          global_shape.has_value()
              ? absl::StrCat(" and global shape ", ShapeToString(*global_shape))
              : " and no global shape"));
    }
    shapes.emplace_back(m.begin() + 2, m.begin() + 2 + m[0]);
  }
  IntVector global;
  if (global_shape.has_value()) {
    global = *global_shape;
  } else {
    global = local.shape();
    for (int d = 0; d < local.dim(); ++d) {
      bool sharded = false;
      for (const Placement& p : placements)
        sharded = sharded || (p.is_shard_like() && p.dim() == d);
      if (!sharded) continue;
      global[d] = 0;
      for (int q = 0; q < comm.size(); ++q) {
        const std::optional<IntVector> coord = mesh->Coordinate(q);
        bool at_zero = coord.has_value();
        for (int i = 0; at_zero && i < mesh->ndim(); ++i) {
          const bool shards_d = placements[i].is_shard_like() && placements[i].dim() == d;
          at_zero = shards_d || (*coord)[i] == 0;
        }
        if (at_zero) global[d] += shapes[q][d];
      }
    }
  }
  std::vector<std::string> errors;
  for (int q = 0; q < comm.size(); ++q) {
    const absl::Status s = ValidateLocalShape(shapes[q], global, *mesh, placements, q, name);
    if (!s.ok()) errors.emplace_back(s.message());
  }
  if (!errors.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": local shapes do not fit global shape ", ShapeToString(global),
                     " with ", PlacementsToString(placements), ": ", absl::StrJoin(errors, "; ")));
  }
  return DTensor::Make(local, std::move(mesh), placements, std::move(global));
}

absl::StatusOr<Tensor> GatherShardedTensor(const ShardedTensor& st, Communicator& comm) {
  // Where this rank's local shards live: kNoShard, kCpu, kCommDevice (comm.device()), or
  // kBadDevice (a device comm does not serve, or several devices), with `bad` saying why.
  constexpr int64_t kBadDevice = -1, kNoShard = 0, kCpu = 1, kCommDevice = 2;
  int64_t where = kNoShard;
  std::string bad;
  for (const LocalShard& shard : st.local_shards()) {
    const Device device = shard.tensor.device();
    const int64_t kind = device.is_cpu()           ? kCpu
                         : device == comm.device() ? kCommDevice
                                                   : kBadDevice;
    if (kind == kBadDevice) {
      bad = absl::StrCat("local shard ", shard.metadata.ToString(), " is on ", device.ToString(),
                         ", which the ", comm.backend(), " communicator (on ",
                         comm.device().ToString(), ") does not serve");
    } else if (where != kNoShard && where != kBadDevice && kind != where) {
      bad = "its local shards are on both the CPU and " + comm.device().ToString();
    }
    where = bad.empty() ? kind : kBadDevice;
  }
  // One item, one bucket (internal/gather_plan.h); the box exchange also compares the
  // ranks' dtypes and global shapes and says where each rank's shards are.
  internal::GatherItem item = internal::MakeShardedItem(st, Device::CPU());
  internal::StandaloneBoxCheck check;
  check.device_code = where;
  internal::GatherItem* const bucket[] = {&item};
  SDRT_RETURN_IF_ERROR(
      internal::ExchangeShardBoxes(comm, "GatherShardedTensor", bucket, &check, nullptr));
  int64_t first_where = kNoShard;  // of the lowest rank holding local shards
  for (int q = 0; q < comm.size(); ++q) {
    const int64_t w = check.rank_device_codes[q];
    if (w == kBadDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GatherShardedTensor: rank ", q, "'s local shards are not all on one device the ",
          comm.backend(), " communicator serves (the CPU or ", comm.device().ToString(), ")",
          q == comm.rank() ? absl::StrCat(": ", bad) : ""));
    }
    if (first_where == kNoShard) first_where = w;
  }
  // The result lives with this rank's local shards; a rank without any follows the lowest
  // rank that has some, and with none anywhere it is on the communicator's device.
  const int64_t here = where != kNoShard ? where : first_where;
  item.target = here == kCpu ? Device::CPU() : comm.device();
  std::vector<Tensor> full(1);
  SDRT_RETURN_IF_ERROR(internal::GatherBucket(comm, bucket, item.target, /*keep=*/true,
                                              absl::MakeSpan(full), nullptr));
  return full[0];
}

}  // namespace sdrt
