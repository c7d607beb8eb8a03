// The second step of the NCCL backend's avg: after an ncclSum, every element divided by
// the rank count on the device, in the element's own dtype, exactly as the MPI backend's
// host loop divides (comm/mpi_communicator.cc), so that avg = sum / n gives the MPI
// backend's bits wherever the sums are the same. Private to the NCCL backend; built only
// with NCCL. No CUDA header is included (the stream is a StreamHandle).
#ifndef SDRT_COMM_INTERNAL_DIVIDE_H_
#define SDRT_COMM_INTERNAL_DIVIDE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtype.h"

namespace sdrt::internal {

// Enqueues data[i] = data[i] / divisor for i in [0, count) on `stream` (a cudaStream_t of
// the current device, which owns `data`): integers (uint8, int8, int32, int64) divide as
// C++ does, truncating toward zero; float32 and float64 divide in their type (IEEE,
// rounded to nearest); float16 and bfloat16 widen to float32, divide, and round to
// nearest even, which for these formats equals the correctly rounded 16-bit quotient.
// count == 0 enqueues nothing. InvalidArgument for divisor < 1, count < 0 or a dtype the
// NCCL backend never averages (bool, int16, float8); CUDA's launch error otherwise (the
// launch's own return value, so an earlier unrelated error is not reported here).
absl::Status DivideOnDevice(void* data, DType dtype, int64_t count, int divisor,
                            StreamHandle stream);

}  // namespace sdrt::internal

#endif  // SDRT_COMM_INTERNAL_DIVIDE_H_
