// Reducing Partial contributions on the receiving side of a reshard (reshard_plan.h): a
// destination takes the first contribution of each element as it is and combines every
// further one into it. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_REDUCE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_REDUCE_H_

#include "absl/status/status.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Whether ReduceInto combines `dtype` (the dtypes all_reduce combines: bool, uint8, the
// signed integers, float16, bfloat16, float32, float64) with `op` (sum, product, min, max;
// avg needs a division after the last contribution and is not combined here).
bool CanReduce(DType dtype, ReduceOp op);

// acc[i] = op(acc[i], in[i]) for every element of two contiguous CPU tensors of the same
// dtype and element count: integers wrap, float16 and bfloat16 combine in float32 and round
// to nearest even, bool sum/max is or and product/min is and. InvalidArgument when
// !CanReduce(dtype, op) or the tensors differ or are not contiguous CPU tensors.
absl::Status ReduceInto(const Tensor& acc, const Tensor& in, ReduceOp op);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_REDUCE_H_
