#include "sdrt/comm/internal/nccl_types.h"

#include <nccl.h>

namespace sdrt::internal {

int NcclDataType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return ncclUint8;
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt8:
      return ncclInt8;
    case DType::kInt16:
      return ncclNumTypes;  // NCCL has no 16-bit integer type
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case DType::kFloat8E4M3FN:
      return ncclFloat8e4m3;
    case DType::kFloat8E5M2:
      return ncclFloat8e5m2;
#else
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
      return ncclNumTypes;
#endif
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
    case DType::kComplex64:
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0FNU:
    case DType::kFloat6E2M3FN:
    case DType::kFloat6E3M2FN:
    case DType::kFloat4E2M1FNx2:
      return ncclNumTypes;  // moved as bytes, never reduced
  }
  return ncclNumTypes;
}

int NcclReduceOp(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // divided afterwards (internal/divide.h)
      return dtype == DType::kBool ? ncclMax : ncclSum;
    case ReduceOp::kProduct:
      return dtype == DType::kBool ? ncclMin : ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclNumOps;
}

}  // namespace sdrt::internal
