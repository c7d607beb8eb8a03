// Local sharding that needs no communicator: cut a rank's piece out of a full tensor
// (DistributeTensor), and the values a rank holds for a Partial placement when it is made
// from a full tensor, so that reducing the locals over every Partial mesh dim, in any
// order, gives back the full tensor. Present in every build (no MPI or NCCL needed).
//
// The Partial rule. PyTorch's distribute_tensor rejects Partial placements and its
// _distribute_tensors gives every rank the full value (docs/SEMANTICS.md 11.7: a
// Partial(sum) DTensor then stands for N times the value); sdrt's rule instead:
//   * off coordinate 0 of some Partial(sum) mesh dim: zeros (the identity of sum; of
//     logical or for bool);
//   * otherwise off coordinate 0 of some Partial(product) mesh dim: ones (the identity of
//     product; of logical and for bool);
//   * otherwise (coordinate 0 of every Partial(sum/product) dim, or only avg / min / max
//     Partials, which are idempotent over equal values): the full tensor's values.
#ifndef SDRT_TENSOR_SHARDING_DISTRIBUTE_H_
#define SDRT_TENSOR_SHARDING_DISTRIBUTE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// What a rank's local tensor holds under the rule above.
enum class PartialIdentity {
  kNone,  // the full tensor's values
  kZero,  // zeros
  kOne,   // ones
};

// The rule above for the rank at mesh coordinate `coordinate`. Pure arithmetic, no
// tensor. InvalidArgument when placements.size() or coordinate.size() differs from
// mesh.ndim() or a coordinate is outside [0, mesh.size(i)).
absl::StatusOr<PartialIdentity> PartialIdentityOf(const DeviceMesh& mesh,
                                                  const std::vector<Placement>& placements,
                                                  IntSpan coordinate);

// Overwrites every element of `local` (any shape and strides, any dtype, on the CPU or a
// CUDA device) with the identity PartialIdentityOf gives: zero bytes for kZero; the value
// one of the dtype for kOne (1.0 in the float formats, float8 included; 1 for the
// integers; true for bool). Returns OK without touching `local` for kNone, for a tensor
// with no elements and for a meta tensor. The fill is written on the host and copied
// (Tensor::CopyFrom, blocking, CUDA's default stream) into a device or non-contiguous
// `local`; a contiguous CPU `local` is written in place. Errors: those of
// PartialIdentityOf (before anything is written), FailedPrecondition for an undefined
// `local`, InvalidArgument for ones of a sub-byte dtype (not written by sdrt), and the allocation
// and copy errors of Tensor (e.g. a CUDA tensor in a build without CUDA).
absl::Status FillPartialIdentity(Tensor& local, const DeviceMesh& mesh,
                                 const std::vector<Placement>& placements, IntSpan coordinate);

// Mirrors torch.distributed.tensor.distribute_tensor(full, mesh, placements), without
// communication: every rank already holds `full` (any strides, on any device: CPU, CUDA,
// or meta, which gives a meta local) and cuts its own piece, Full[I_0 x I_1 x ...] with
// the owned index lists of `rank` (docs/SEMANTICS.md 1.5), into a new contiguous tensor on full's
// device: one strided copy per combination of owned runs (one for a Shard or uneven
// piece, up to split_factor per _StridedShard dim). Partial placements (which PyTorch's
// distribute_tensor rejects) get values whose reduction in any mesh-dim order gives back
// `full` (PartialIdentityOf below): a rank off coordinate 0 of some Partial(sum)
// mesh dim holds zeros; otherwise a rank off coordinate 0 of some Partial(product) mesh
// dim holds ones; every other rank (avg, min, max) holds `full`'s values. CUDA copies and
// fills complete before returning. InvalidArgument for an undefined `full`, a null mesh,
// a rank not in the mesh, a sub-byte `full` that some rank's piece would cut inside a byte
// (CheckShardingCutsWholeBytes, sharding/byte_cuts.h) and the errors of
// ComputeLocalShapeAndGlobalOffset; the
// allocation and copy errors of Tensor (e.g. a CUDA `full` in a build without CUDA).
absl::StatusOr<DTensor> DistributeTensor(const Tensor& full, std::shared_ptr<const DeviceMesh> mesh,
                                         const std::vector<Placement>& placements, int64_t rank);

// DistributeTensor's work into a `local` the caller allocated: this rank's piece of `full`
// (or its Partial identity) is written into `local`, which must be defined, of full's
// dtype and of this rank's local shape (any strides, on any device a copy from full's
// reaches). The same errors as DistributeTensor, and InvalidArgument for a `local` of
// another dtype or shape; the sharding is checked before anything is written. `info`, when
// not null, is ComputeLocalShapeAndGlobalOffset's result for these arguments, which the
// caller already has (it is then not computed again).
absl::Status DistributeTensorInto(const Tensor& full, const DeviceMesh& mesh,
                                  const std::vector<Placement>& placements, int64_t rank,
                                  Tensor& local, const LocalShardInfo* info = nullptr);

}  // namespace sdrt

#endif  // SDRT_TENSOR_SHARDING_DISTRIBUTE_H_
