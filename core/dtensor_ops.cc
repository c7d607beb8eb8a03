#include "core/dtensor_ops.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tensor/sharding.h"
#include "tensor/strided_copy.h"

// Status plumbing local to this file: declare-and-assign from a StatusOr, or return its
// error; return a non-OK Status.
#define SDRT_OPS_CONCAT_INNER(a, b) a##b
#define SDRT_OPS_CONCAT(a, b) SDRT_OPS_CONCAT_INNER(a, b)
#define SDRT_OPS_ASSIGN_OR_RETURN_IMPL(var, tmp, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  var = *std::move(tmp)
#define SDRT_ASSIGN_OR_RETURN(var, expr) \
  SDRT_OPS_ASSIGN_OR_RETURN_IMPL(var, SDRT_OPS_CONCAT(status_or_, __LINE__), expr)
#define SDRT_RETURN_IF_ERROR(expr)       \
  do {                                   \
    const absl::Status status_ = (expr); \
    if (!status_.ok()) return status_;   \
  } while (false)

namespace sdrt {
namespace {

// Copies between a contiguous `piece` of shape `piece_shape` and the positions
// full[lists[0][i0], lists[1][i1], ...] of the contiguous `full` of shape `full_shape`:
// into `full` when `into_full`, else out of it. A last dim whose list is a contiguous run
// moves as whole rows.
void OuterProductCopy(char* full, IntSpan full_shape, char* piece, IntSpan piece_shape,
                      const std::vector<std::vector<int64_t>>& lists, int64_t elem,
                      bool into_full) {
  const int ndim = static_cast<int>(piece_shape.size());
  int64_t numel = 1;
  for (int64_t s : piece_shape) numel *= s;
  if (numel == 0) return;
  if (ndim == 0) {
    into_full ? std::memcpy(full, piece, elem) : std::memcpy(piece, full, elem);
    return;
  }
  const IntVector full_strides = ContiguousStrides(full_shape);
  const std::vector<int64_t>& last = lists[ndim - 1];
  const int64_t row = piece_shape[ndim - 1];
  bool run = true;
  for (int64_t j = 1; j < row; ++j) run = run && last[j] == last[0] + j;
  IntVector index(static_cast<size_t>(ndim), 0);
  for (int64_t row_start = 0; row_start < numel; row_start += row) {
    int64_t base = 0;
    for (int d = 0; d + 1 < ndim; ++d) base += lists[d][index[d]] * full_strides[d];
    char* p = piece + row_start * elem;
    if (run) {
      char* f = full + (base + last[0]) * elem;
      into_full ? std::memcpy(f, p, row * elem) : std::memcpy(p, f, row * elem);
    } else {
      for (int64_t j = 0; j < row; ++j) {
        char* f = full + (base + last[j]) * elem;
        into_full ? std::memcpy(f, p + j * elem, elem) : std::memcpy(p + j * elem, f, elem);
      }
    }
    for (int d = ndim - 2; d >= 0; --d) {
      if (++index[d] < piece_shape[d]) break;
      index[d] = 0;
    }
  }
}

std::vector<std::vector<int64_t>> AllOwnedIndices(const LocalShardInfo& info) {
  std::vector<std::vector<int64_t>> lists;
  for (int d = 0; d < static_cast<int>(info.global_offset.size()); ++d) {
    lists.push_back(OwnedIndices(info, d));
  }
  return lists;
}

// Fills a contiguous tensor with the value one of its dtype.
void FillOne(Tensor& t) {
  uint64_t one = 0;
  switch (t.dtype()) {
    case DType::kFloat16:
      one = 0x3c00;
      break;
    case DType::kBFloat16:
      one = 0x3f80;
      break;
    case DType::kFloat32: {
      const float f = 1.0f;
      std::memcpy(&one, &f, sizeof(f));
      break;
    }
    case DType::kFloat64: {
      const double f = 1.0;
      std::memcpy(&one, &f, sizeof(f));
      break;
    }
    case DType::kFloat8E4M3FN:
      one = 0x38;
      break;
    case DType::kFloat8E5M2:
      one = 0x3c;
      break;
    default:  // bool and the integers, little-endian
      one = 1;
      break;
  }
  char* data = static_cast<char*>(t.data_ptr());
  const int64_t elem = t.element_size();
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(data + i * elem, &one, elem);
}

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

}  // namespace

absl::StatusOr<DTensor> DistributeTensor(const Tensor& full, std::shared_ptr<const DeviceMesh> mesh,
                                         const std::vector<Placement>& placements, int64_t rank) {
  if (!full.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributeTensor: the full tensor must be on the CPU, got ", full.ToString()));
  }
  if (mesh == nullptr) return absl::InvalidArgumentError("DistributeTensor: null mesh");
  const std::optional<IntVector> coord = mesh->Coordinate(rank);
  if (!coord.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributeTensor: rank ", rank, " is not in ", mesh->ToString()));
  }
  SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                        ComputeLocalShapeAndGlobalOffset(full.shape(), *mesh, placements, rank));
  Tensor local;
  if (info.is_slice) {
    Tensor view = full;
    for (int d = 0; d < full.dim(); ++d) {
      SDRT_ASSIGN_OR_RETURN(view, view.Narrow(d, info.global_offset[d], info.local_shape[d]));
    }
    SDRT_ASSIGN_OR_RETURN(local, view.Clone());
  } else {
    SDRT_ASSIGN_OR_RETURN(const Tensor source, full.Contiguous());
    SDRT_ASSIGN_OR_RETURN(local, Tensor::Empty(info.local_shape, full.dtype()));
    OuterProductCopy(static_cast<char*>(source.data_ptr()), full.shape(),
                     static_cast<char*>(local.data_ptr()), info.local_shape, AllOwnedIndices(info),
                     full.element_size(), /*into_full=*/false);
  }
  bool zero = false;
  bool one = false;
  for (int i = 0; i < mesh->ndim(); ++i) {
    if (!placements[i].is_partial() || (*coord)[i] == 0) continue;
    zero = zero || placements[i].reduce_op() == ReduceOp::kSum;
    one = one || placements[i].reduce_op() == ReduceOp::kProduct;
  }
  if (zero) {
    std::memset(local.data_ptr(), 0, static_cast<size_t>(local.nbytes()));
  } else if (one) {
    FillOne(local);
  }
  return DTensor::Make(std::move(local), std::move(mesh), placements, full.shape());
}

absl::StatusOr<Tensor> FullTensor(const DTensor& dtensor, DeviceMeshComm& mesh_comm) {
  const DeviceMesh& mesh = *mesh_comm.mesh();
  if (dtensor.mesh() == nullptr || *dtensor.mesh() != mesh) {
    return absl::InvalidArgumentError(
        absl::StrCat("FullTensor: ", dtensor.ToString(), " is not on ", mesh.ToString()));
  }
  if (!dtensor.local().device().is_cpu()) {
    return absl::InvalidArgumentError(
        absl::StrCat("FullTensor: the local tensor must be on the CPU: ", dtensor.ToString()));
  }
  const std::vector<Placement>& placements = dtensor.placements();
  const IntVector& global_shape = dtensor.global_shape();
  Communicator& comm = mesh_comm.comm();
  SDRT_RETURN_IF_ERROR(
      ValidateLocalShape(dtensor.local().shape(), global_shape, mesh, placements, comm.rank()));
  SDRT_ASSIGN_OR_RETURN(const std::vector<int> order, MeshDimsToReplicate(mesh, placements));
  if (order.empty()) return dtensor.local();

  SDRT_ASSIGN_OR_RETURN(Tensor local, dtensor.local().Clone());
  for (int i : order) {
    if (!placements[i].is_partial()) continue;
    SDRT_ASSIGN_OR_RETURN(Communicator * dim_comm, mesh_comm.DimComm(i));
    SDRT_RETURN_IF_ERROR(dim_comm->AllReduce(local, placements[i].reduce_op()));
  }
  if (NumShards(mesh, placements) == 1) return local;

  // Every rank's piece, in communicator rank order (a mesh rank is a communicator rank).
  std::vector<int64_t> counts(static_cast<size_t>(comm.size()));
  int64_t total = 0;
  for (int q = 0; q < comm.size(); ++q) {
    SDRT_ASSIGN_OR_RETURN(const IntVector shape,
                          ComputeLocalShape(global_shape, mesh, placements, q));
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    counts[q] = n;
    total += n;
  }
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, local.dtype()));
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, local, counts));
  SDRT_ASSIGN_OR_RETURN(Tensor full, Tensor::Empty(global_shape, local.dtype()));
  const int64_t elem = local.element_size();
  int64_t start = 0;
  for (int q = 0; q < comm.size(); ++q) {
    const int64_t begin = start;
    start += counts[q];
    // The ranks off coordinate 0 of a non-shard mesh dim hold copies; skip them.
    const IntVector coord = *mesh.Coordinate(q);
    bool copy = false;
    for (int i = 0; i < mesh.ndim(); ++i)
      copy = copy || (!placements[i].is_shard_like() && coord[i] != 0);
    if (copy || counts[q] == 0) continue;
    SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                          ComputeLocalShapeAndGlobalOffset(global_shape, mesh, placements, q));
    OuterProductCopy(static_cast<char*>(full.data_ptr()), global_shape,
                     static_cast<char*>(gathered.data_ptr()) + begin * elem, info.local_shape,
                     AllOwnedIndices(info), elem, /*into_full=*/true);
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
  // Message: [dtype, ndim, global shape..., then per local shard offsets..., sizes...].
  std::vector<int64_t> message = {static_cast<int64_t>(st.dtype()), ndim};
  message.insert(message.end(), global_shape.begin(), global_shape.end());
  int64_t mine = 0;
  for (const LocalShard& shard : st.local_shards()) {
    if (!shard.tensor.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GatherShardedTensor: local shard ", shard.metadata.ToString(), " is not on the CPU"));
    }
    message.insert(message.end(), shard.metadata.offsets.begin(), shard.metadata.offsets.end());
    message.insert(message.end(), shard.metadata.sizes.begin(), shard.metadata.sizes.end());
    mine += shard.tensor.numel();
  }
  SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty({mine}, st.dtype()));
  const int64_t elem = local.element_size();
  int64_t at = 0;
  for (const LocalShard& shard : st.local_shards()) {
    SDRT_ASSIGN_OR_RETURN(
        Tensor dst,
        Tensor::FromStorage(local.storage(), st.dtype(), shard.tensor.shape(),
                            ContiguousStrides(shard.tensor.shape()), local.storage_offset() + at));
    SDRT_RETURN_IF_ERROR(dst.CopyFrom(shard.tensor));
    at += shard.tensor.numel();
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all,
                        comm.AllGatherBytes(EncodeInts(message)));
  std::vector<std::vector<int64_t>> metas;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int q = 0; q < comm.size(); ++q) {
    std::vector<int64_t> m = DecodeInts(all[q]);
    if (m[0] != message[0] || m[1] != ndim ||
        !std::equal(m.begin() + 2, m.begin() + 2 + ndim, global_shape.begin())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GatherShardedTensor: rank ", q, " has a ShardedTensor of ",
          DTypeName(static_cast<DType>(m[0])), ShapeToString(IntSpan(m).subspan(2, m[1])),
          ", rank ", comm.rank(), " one of ", DTypeName(st.dtype()), ShapeToString(global_shape)));
    }
    int64_t count = 0;
    for (size_t s = 2 + ndim; s < m.size(); s += 2 * ndim) {
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
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, st.dtype()));
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, local, counts));
  SDRT_ASSIGN_OR_RETURN(Tensor full, Tensor::Zeros(global_shape, st.dtype()));
  const IntVector full_strides = ContiguousStrides(global_shape);
  const char* src = static_cast<const char*>(gathered.data_ptr());
  for (const std::vector<int64_t>& m : metas) {
    for (size_t s = 2 + ndim; s < m.size(); s += 2 * ndim) {
      const IntSpan offsets = IntSpan(m).subspan(s, ndim);
      const IntSpan sizes = IntSpan(m).subspan(s + ndim, ndim);
      int64_t n = 1;
      int64_t base = 0;
      for (int d = 0; d < ndim; ++d) {
        n *= sizes[d];
        base += offsets[d] * full_strides[d];
      }
      if (n == 0) continue;
      SDRT_RETURN_IF_ERROR(StridedCopyHost(static_cast<char*>(full.data_ptr()) + base * elem, src,
                                           elem, sizes, full_strides, ContiguousStrides(sizes)));
      src += n * elem;
    }
  }
  return full;
}

}  // namespace sdrt
