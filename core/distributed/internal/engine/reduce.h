// Reducing Partial contributions on the receiving side of a reshard (plan.h): a
// destination takes the first contribution of each element as it is and combines every
// further one into it; an average is divided once its last contribution is in. Not public
// API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_REDUCE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_REDUCE_H_

#include "absl/status/status.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Whether ReduceInto combines `dtype` (the dtypes all_reduce combines: bool, uint8, the
// signed integers, float16, bfloat16, float32, float64) with `op` (sum, product, min, max);
// avg only the floating dtypes, as PyTorch, whose avg divides in place, refuses the others.
bool CanReduce(DType dtype, ReduceOp op);

// acc[i] = op(acc[i], in[i]) for every element of two contiguous CPU tensors of the same
// dtype and element count: integers wrap, float16 and bfloat16 combine in float32 and round
// to nearest even, bool sum/max is or and product/min is and. InvalidArgument when
// !CanReduce(dtype, op) or the tensors differ or are not contiguous CPU tensors.
// avg combines as sum (DivideBy finishes it).
absl::Status ReduceInto(const Tensor& acc, const Tensor& in, ReduceOp op);

// acc[i] = acc[i] / divisor for every element of a contiguous CPU tensor of a floating
// dtype, as PyTorch's avg (and comm's MPI backend) divides: float32 and float64 in their
// type, float16 and bfloat16 in float32 rounded to nearest even. InvalidArgument when
// !CanReduce(acc.dtype(), kAvg), divisor < 1 or acc is not a contiguous CPU tensor.
absl::Status DivideBy(const Tensor& acc, int64_t divisor);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_REDUCE_H_
