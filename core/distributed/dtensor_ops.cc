#include "sdrt/core/distributed/dtensor_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/gather_transfer.h"
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

  // One tensor, one bucket: the transfer engine's gather (internal/gather_transfer.h),
  // agreed on first so that a rank alone in error fails every rank.
  constexpr absl::string_view kOp = "FullTensor";
  internal::GatherTransfer gather(kOp, comm, {}, std::numeric_limits<int64_t>::max());
  gather.AddDTensor("", dtensor, &mesh_comm, dtensor.local().device());
  const absl::Status local_error = gather.Prepare();
  AgreementPayload payload;
  payload.mine = gather.payload();
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, local_error, nullptr, &payload));
  SDRT_RETURN_IF_ERROR(gather.Run(kOp, payload.all, nullptr));
  return std::move(gather.result(0));
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
  // One tensor, one bucket (internal/gather_transfer.h). The agreement carries, before the
  // boxes, what every rank must share: the dtype and global shape, and where its shards are.
  constexpr absl::string_view kOp = "GatherShardedTensor";
  internal::GatherTransfer gather(kOp, comm, {}, std::numeric_limits<int64_t>::max());
  gather.AddSharded("", st, Device::CPU());
  const absl::Status local_error = gather.Prepare();
  AgreementPayload payload;
  internal::PutU64(&payload.mine, static_cast<uint64_t>(st.dtype()));
  internal::PutU64(&payload.mine, static_cast<uint64_t>(where));
  internal::PutU64(&payload.mine, st.global_shape().size());
  for (int64_t s : st.global_shape()) internal::PutU64(&payload.mine, static_cast<uint64_t>(s));
  internal::PutString(&payload.mine, gather.payload());
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, kOp, "", {}, local_error, nullptr, &payload));
  std::vector<std::string> boxes(payload.all.size());
  int64_t first_where = kNoShard;  // of the lowest rank holding local shards
  for (int q = 0; q < comm.size(); ++q) {
    internal::ByteReader reader(payload.all[q]);
    uint64_t dtype = 0, w = 0, ndim = 0;
    IntVector shape;
    bool ok = reader.Bounded(kNumDTypes - 1, &dtype) && reader.U64(&w) &&
              reader.Bounded(internal::kMaxTransferDims, &ndim);
    for (uint64_t d = 0; ok && d < ndim; ++d) {
      uint64_t v = 0;
      ok = reader.U64(&v);
      shape.push_back(static_cast<int64_t>(v));
    }
    if (!ok || !reader.String(&boxes[q])) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": rank ", q, " sent a malformed shard box message"));
    }
    if (static_cast<DType>(dtype) != st.dtype() || shape != st.global_shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": rank ", q, " has a ShardedTensor of ", DTypeName(static_cast<DType>(dtype)),
          ShapeToString(shape), ", rank ", comm.rank(), " one of ", DTypeName(st.dtype()),
          ShapeToString(st.global_shape())));
    }
    const int64_t wq = static_cast<int64_t>(w);
    if (wq == kBadDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOp, ": rank ", q, "'s local shards are not all on one device the ", comm.backend(),
          " communicator serves (the CPU or ", comm.device().ToString(), ")",
          q == comm.rank() ? absl::StrCat(": ", bad) : ""));
    }
    if (first_where == kNoShard) first_where = wq;
  }
  // The result lives with this rank's local shards; a rank without any follows the lowest
  // rank that has some, and with none anywhere it is on the communicator's device.
  const int64_t here = where != kNoShard ? where : first_where;
  gather.SetTarget(0, here == kCpu ? Device::CPU() : comm.device());
  SDRT_RETURN_IF_ERROR(gather.Run(kOp, boxes, nullptr));
  return std::move(gather.result(0));
}

}  // namespace sdrt
