#include "sdrt/comm/internal/nccl_types.h"

#include <nccl.h>

namespace sdrt::internal {

int NcclDataType(DType dtype) {
  const int bits = ElementBits(dtype);
  switch (ReduceKindOf(dtype)) {
    case ReduceKind::kBool:  // 0 or 1
    case ReduceKind::kUnsigned:
      return bits == 8    ? ncclUint8
             : bits == 32 ? ncclUint32
             : bits == 64 ? ncclUint64
                          : ncclNumTypes;
    case ReduceKind::kSigned:  // NCCL has no 16-bit integer type
      return bits == 8 ? ncclInt8 : bits == 32 ? ncclInt32 : bits == 64 ? ncclInt64 : ncclNumTypes;
    case ReduceKind::kFloat:
      return bits == 16 ? ncclFloat16 : bits == 32 ? ncclFloat32 : ncclFloat64;
    case ReduceKind::kBFloat:
      return ncclBfloat16;
    case ReduceKind::kNone:  // moved as bytes, never reduced
      break;
  }
  return ncclNumTypes;
}

int NcclReduceOp(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:  // divided afterwards (internal/divide.h)
      return ReduceKindOf(dtype) == ReduceKind::kBool ? ncclMax : ncclSum;
    case ReduceOp::kProduct:
      return ReduceKindOf(dtype) == ReduceKind::kBool ? ncclMin : ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclNumOps;
}

}  // namespace sdrt::internal
