#include "sdrt/core/distributed/dtensor_ops.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/sharding/region_copy.h"
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

// True when rank `q` only holds a copy of what a rank at coordinate 0 holds: its
// coordinate is not 0 on some mesh dim that does not shard (Replicate, or Partial once
// all-reduced).
bool HoldsACopy(const DeviceMesh& mesh, const std::vector<Placement>& placements, int64_t q) {
  const IntVector coord = *mesh.Coordinate(q);
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_shard_like() && coord[i] != 0) return true;
  }
  return false;
}

// The contiguous `count` elements of the 1-D `flat` from `start`, viewed as `shape`.
absl::StatusOr<Tensor> Piece(const Tensor& flat, int64_t start, int64_t count, IntSpan shape) {
  SDRT_ASSIGN_OR_RETURN(const Tensor run, flat.Narrow(0, start, count));
  return run.View(shape);
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
  SDRT_ASSIGN_OR_RETURN(const std::vector<int> order, MeshDimsToReplicate(mesh, placements));
  if (order.empty()) return dtensor.local();

  bool reduces = false;
  for (int i : order) reduces = reduces || placements[i].is_partial();
  // The all-reduces work in place on a copy; the all-gather only reads the local.
  Tensor local;
  if (reduces) {
    SDRT_ASSIGN_OR_RETURN(local, dtensor.local().Clone());
  } else {
    SDRT_ASSIGN_OR_RETURN(local, dtensor.local().Contiguous());
  }
  for (int i : order) {
    if (!placements[i].is_partial()) continue;
    SDRT_ASSIGN_OR_RETURN(Communicator * dim_comm, mesh_comm.DimComm(i));
    SDRT_RETURN_IF_ERROR(dim_comm->AllReduce(local, placements[i].reduce_op()));
  }
  if (NumShards(mesh, placements) == 1) return local;

  // Every rank's piece, in communicator rank order (a mesh rank is a communicator rank).
  // A rank holding a copy sends nothing: its piece equals the one at coordinate 0.
  std::vector<int64_t> counts(static_cast<size_t>(comm.size()), 0);
  int64_t total = 0;
  for (int q = 0; q < comm.size(); ++q) {
    if (HoldsACopy(mesh, placements, q)) continue;
    SDRT_ASSIGN_OR_RETURN(const IntVector shape,
                          ComputeLocalShape(global_shape, mesh, placements, q));
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    counts[q] = n;
    total += n;
  }
  SDRT_ASSIGN_OR_RETURN(const Tensor flat, local.Flatten());
  SDRT_ASSIGN_OR_RETURN(const Tensor input, flat.Narrow(0, 0, counts[comm.rank()]));
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, local.dtype(), local.device()));
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, input, counts));
  SDRT_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(global_shape, local.dtype(), local.device()));
  // The pieces of the ranks that hold no copy tile the full tensor.
  const IntVector origin(global_shape.size(), 0);
  int64_t start = 0;
  for (int q = 0; q < comm.size(); ++q) {
    const int64_t begin = start;
    start += counts[q];
    if (counts[q] == 0) continue;
    SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                          ComputeLocalShapeAndGlobalOffset(global_shape, mesh, placements, q));
    SDRT_ASSIGN_OR_RETURN(const Tensor piece, Piece(gathered, begin, counts[q], info.local_shape));
    SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, piece, OwnedRuns(info), /*to_local=*/false));
  }
  return full;
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
  const IntVector& global_shape = st.global_shape();
  const int ndim = static_cast<int>(global_shape.size());
  // Where this rank's local shards live: kNoShard, kCpu, kCommDevice (comm.device()), or
  // kBadDevice (a device comm does not serve, or several devices), with `bad` saying why.
  constexpr int64_t kBadDevice = -1, kNoShard = 0, kCpu = 1, kCommDevice = 2;
  int64_t where = kNoShard;
  std::string bad;
  int64_t mine = 0;
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
    mine += shard.tensor.numel();
  }
  // Message: [dtype, ndim, where, number of local shards, global shape..., then per local
  // shard offsets..., sizes...] (a 0-dim shard has neither and holds one element).
  constexpr size_t kShape = 4;
  const auto shards = static_cast<int64_t>(st.local_shards().size());
  std::vector<int64_t> message = {static_cast<int64_t>(st.dtype()), ndim, where, shards};
  message.insert(message.end(), global_shape.begin(), global_shape.end());
  for (const LocalShard& shard : st.local_shards()) {
    message.insert(message.end(), shard.metadata.offsets.begin(), shard.metadata.offsets.end());
    message.insert(message.end(), shard.metadata.sizes.begin(), shard.metadata.sizes.end());
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                        comm.AllGatherBytes(EncodeInts(message)));
  std::vector<std::vector<int64_t>> metas;
  std::vector<int64_t> counts;
  int64_t total = 0;
  int64_t first_where = kNoShard;  // of the lowest rank holding local shards
  for (int q = 0; q < comm.size(); ++q) {
    std::vector<int64_t> m = DecodeInts(all[q]);
    if (m[0] != message[0] || m[1] != ndim ||
        !std::equal(m.begin() + kShape, m.begin() + kShape + ndim, global_shape.begin())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GatherShardedTensor: rank ", q, " has a ShardedTensor of ",
          DTypeName(static_cast<DType>(m[0])), ShapeToString(IntSpan(m).subspan(kShape, m[1])),
          ", rank ", comm.rank(), " one of ", DTypeName(st.dtype()), ShapeToString(global_shape)));
    }
    if (m[2] == kBadDevice) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GatherShardedTensor: rank ", q, "'s local shards are not all on one device the ",
          comm.backend(), " communicator serves (the CPU or ", comm.device().ToString(), ")",
          q == comm.rank() ? absl::StrCat(": ", bad) : ""));
    }
    if (first_where == kNoShard) first_where = m[2];
    int64_t count = 0;
    for (int64_t k = 0; k < m[3]; ++k) {
      const size_t s = kShape + ndim + 2 * ndim * k;
      int64_t n = 1;
      for (int d = 0; d < ndim; ++d) {
        const int64_t offset = m[s + d];
        const int64_t size = m[s + ndim + d];
        n *= size;
        if (size > 0 && offset + size > global_shape[d]) {
          return absl::InvalidArgumentError(
              absl::StrCat("GatherShardedTensor: a shard of rank ", q, " at offsets ",
                           ShapeToString(IntSpan(m).subspan(s, ndim)), " with sizes ",
                           ShapeToString(IntSpan(m).subspan(s + ndim, ndim)), " does not fit in ",
                           ShapeToString(global_shape)));
        }
      }
      count += n;
    }
    counts.push_back(count);
    total += count;
    metas.push_back(std::move(m));
  }
  // The result lives with this rank's local shards; a rank without any follows the lowest
  // rank that has some, and with none anywhere it is on the communicator's device.
  const int64_t here = where != kNoShard ? where : first_where;
  const Device device = here == kCpu ? Device::CPU() : comm.device();

  // This rank's shards packed in list order, the order of its metadata in the message.
  SDRT_ASSIGN_OR_RETURN(const Tensor local, Tensor::Empty({mine}, st.dtype(), device));
  int64_t at = 0;
  for (const LocalShard& shard : st.local_shards()) {
    SDRT_ASSIGN_OR_RETURN(Tensor dst, Piece(local, at, shard.tensor.numel(), shard.tensor.shape()));
    SDRT_RETURN_IF_ERROR(dst.CopyFrom(shard.tensor));
    at += shard.tensor.numel();
  }
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, st.dtype(), device));
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, local, counts));
  SDRT_ASSIGN_OR_RETURN(Tensor full, Tensor::Zeros(global_shape, st.dtype(), device));
  const IntVector origin(global_shape.size(), 0);
  int64_t src = 0;
  for (const std::vector<int64_t>& m : metas) {
    for (int64_t k = 0; k < m[3]; ++k) {
      const size_t s = kShape + ndim + 2 * ndim * k;
      const IntSpan offsets = IntSpan(m).subspan(s, ndim);
      const IntSpan sizes = IntSpan(m).subspan(s + ndim, ndim);
      int64_t n = 1;
      for (int d = 0; d < ndim; ++d) n *= sizes[d];
      if (n == 0) continue;
      SDRT_ASSIGN_OR_RETURN(const Tensor piece, Piece(gathered, src, n, sizes));
      SDRT_RETURN_IF_ERROR(
          CopyRuns(full, origin, piece, BoxRuns(offsets, sizes), /*to_local=*/false));
      src += n;
    }
  }
  return full;
}

}  // namespace sdrt
