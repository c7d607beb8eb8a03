// The dtype and reduce-op mappings of the NCCL backend, exposed for tests. Values are
// ncclDataType_t / ncclRedOp_t as int so that this header does not include nccl.h; the
// definitions are in nccl_types.cc beside it. Built only with NCCL.
#ifndef SDRT_COMM_INTERNAL_NCCL_TYPES_H_
#define SDRT_COMM_INTERNAL_NCCL_TYPES_H_

#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/reduce_op.h"

namespace sdrt::internal {

// The ncclDataType_t `dtype` is reduced as, from the dtype table's reduce column and width:
// bool as ncclUint8 (0 or 1), the integers and floats as NCCL's type of their kind and
// width. ncclNumTypes means none: the dtypes never reduced (ReduceKind::kNone) and int16
// (NCCL has no 16-bit integer).
int NcclDataType(DType dtype);

// The ncclRedOp_t for (dtype, op): bool maps sum to ncclMax (logical or) and product to
// ncclMin (logical and) like ProcessGroupNCCL; avg is ncclSum, which the backend then
// divides by the rank count as the MPI backend does (not ncclAvg, which pre-multiplies
// floats by 1/n).
int NcclReduceOp(DType dtype, ReduceOp op);

}  // namespace sdrt::internal

#endif  // SDRT_COMM_INTERNAL_NCCL_TYPES_H_
