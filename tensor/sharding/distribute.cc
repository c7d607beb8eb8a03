#include "sdrt/tensor/sharding/distribute.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

// The bytes of the value one of `dtype`, little-endian, in the low ElementBits(dtype) / 8
// bytes (complex64: 1 + 0i). Not for sub-byte dtypes.
uint64_t OneBits(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 0x3c00;
    case DType::kBFloat16:
      return 0x3f80;
    case DType::kFloat32: {
      const float f = 1.0f;
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof(f));
      return bits;
    }
    case DType::kFloat64: {
      const double f = 1.0;
      uint64_t bits = 0;
      std::memcpy(&bits, &f, sizeof(f));
      return bits;
    }
    case DType::kFloat8E4M3FN:
      return 0x38;
    case DType::kFloat8E5M2:
      return 0x3c;
    case DType::kFloat8E4M3FNUZ:  // exponent bias 8
    case DType::kFloat8E5M2FNUZ:  // exponent bias 16
      return 0x40;
    case DType::kFloat8E8M0FNU:  // 2^(127 - 127)
      return 0x7f;
    case DType::kComplex64: {
      const float f = 1.0f;
      uint32_t bits = 0;
      std::memcpy(&bits, &f, sizeof(f));
      return bits;  // the imaginary part's bytes are zero
    }
    default:  // bool and the integers
      return 1;
  }
}

// Writes the fill into a contiguous CPU tensor.
void FillHost(Tensor& t, PartialIdentity fill) {
  char* data = static_cast<char*>(t.data_ptr());
  if (fill == PartialIdentity::kZero) {
    std::memset(data, 0, static_cast<size_t>(t.nbytes()));
    return;
  }
  const uint64_t one = OneBits(t.dtype());
  const int64_t elem = ElementBits(t.dtype()) / 8;
  for (int64_t i = 0; i < t.numel(); ++i) std::memcpy(data + i * elem, &one, elem);
}

}  // namespace

absl::StatusOr<PartialIdentity> PartialIdentityOf(const DeviceMesh& mesh,
                                                  const std::vector<Placement>& placements,
                                                  IntSpan coordinate) {
  if (static_cast<int>(placements.size()) != mesh.ndim() ||
      static_cast<int>(coordinate.size()) != mesh.ndim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PartialIdentityOf: ", mesh.ToString(), " has ", mesh.ndim(), " dims but ",
        PlacementsToString(placements), " has ", placements.size(), " placements and coordinate ",
        ShapeToString(coordinate), " ", coordinate.size(), " entries"));
  }
  bool zero = false;
  bool one = false;
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (coordinate[i] < 0 || coordinate[i] >= mesh.size(i)) {
      return absl::InvalidArgumentError(absl::StrCat("PartialIdentityOf: coordinate ",
                                                     ShapeToString(coordinate), " is outside ",
                                                     mesh.ToString()));
    }
    if (!placements[i].is_partial() || coordinate[i] == 0) continue;
    zero = zero || placements[i].reduce_op() == ReduceOp::kSum;
    one = one || placements[i].reduce_op() == ReduceOp::kProduct;
  }
  if (zero) return PartialIdentity::kZero;
  return one ? PartialIdentity::kOne : PartialIdentity::kNone;
}

absl::Status FillPartialIdentity(Tensor& local, const DeviceMesh& mesh,
                                 const std::vector<Placement>& placements, IntSpan coordinate) {
  SDRT_ASSIGN_OR_RETURN(const PartialIdentity fill,
                        PartialIdentityOf(mesh, placements, coordinate));
  if (!local.defined())
    return absl::FailedPreconditionError("FillPartialIdentity: undefined tensor");
  if (fill == PartialIdentity::kNone || local.numel() == 0 || local.is_meta()) {
    return absl::OkStatus();
  }
  if (fill == PartialIdentity::kOne && IsSubByte(local.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("FillPartialIdentity: a Partial(prod) piece of ", local.ToString(),
                     " needs the value one, which sdrt does not write for sub-byte dtypes"));
  }
  if (local.device().is_cpu() && local.is_contiguous()) {
    FillHost(local, fill);
    return absl::OkStatus();
  }
  SDRT_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(local.shape(), local.dtype()));
  FillHost(host, fill);
  return local.CopyFrom(host);
}

absl::Status DistributeTensorInto(const Tensor& full, const DeviceMesh& mesh,
                                  const std::vector<Placement>& placements, int64_t rank,
                                  Tensor& local, const LocalShardInfo* known) {
  if (!full.defined()) return absl::InvalidArgumentError("DistributeTensor: undefined tensor");
  const std::optional<IntVector> coord = mesh.Coordinate(rank);
  if (!coord.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributeTensor: rank ", rank, " is not in ", mesh.ToString()));
  }
  LocalShardInfo computed;
  if (known == nullptr) {
    SDRT_ASSIGN_OR_RETURN(computed,
                          ComputeLocalShapeAndGlobalOffset(full.shape(), mesh, placements, rank));
  }
  const LocalShardInfo& info = known != nullptr ? *known : computed;
  SDRT_RETURN_IF_ERROR(
      internal::CheckShardingCutsWholeBytes("", full.dtype(), full.shape(), mesh, placements));
  SDRT_ASSIGN_OR_RETURN(const PartialIdentity fill, PartialIdentityOf(mesh, placements, *coord));
  if (!local.defined() || local.dtype() != full.dtype() ||
      !std::equal(local.shape().begin(), local.shape().end(), info.local_shape.begin(),
                  info.local_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DistributeTensor: the local tensor ", local.defined() ? local.ToString() : "(undefined)",
        " is not rank ", rank, "'s piece ", DTypeName(full.dtype()),
        ShapeToString(info.local_shape)));
  }
  if (fill == PartialIdentity::kNone) {
    const IntVector origin(static_cast<size_t>(full.dim()), 0);
    return internal::CopyRuns(full, origin, local, internal::OwnedRuns(info), /*to_local=*/true);
  }
  // Every element is overwritten by the identity: nothing to copy first.
  return FillPartialIdentity(local, mesh, placements, *coord);
}

absl::StatusOr<DTensor> DistributeTensor(const Tensor& full, std::shared_ptr<const DeviceMesh> mesh,
                                         const std::vector<Placement>& placements, int64_t rank) {
  if (!full.defined()) return absl::InvalidArgumentError("DistributeTensor: undefined tensor");
  if (mesh == nullptr) return absl::InvalidArgumentError("DistributeTensor: null mesh");
  if (!mesh->Coordinate(rank).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("DistributeTensor: rank ", rank, " is not in ", mesh->ToString()));
  }
  SDRT_ASSIGN_OR_RETURN(const LocalShardInfo info,
                        ComputeLocalShapeAndGlobalOffset(full.shape(), *mesh, placements, rank));
  SDRT_ASSIGN_OR_RETURN(Tensor local, Tensor::Empty(info.local_shape, full.dtype(), full.device()));
  SDRT_RETURN_IF_ERROR(DistributeTensorInto(full, *mesh, placements, rank, local, &info));
  return DTensor::Make(std::move(local), std::move(mesh), placements, full.shape());
}

}  // namespace sdrt
