// Argument validation and planning shared by the host paths (tensor/backend/strided_copy.cc)
// and the CUDA launchers (cuda/kernels.cu), so that both reject the same inputs with
// the same messages and run the same plan. Internal to tensor/ and cuda/.
#ifndef SDRT_TENSOR_BACKEND_COPY_VALIDATION_H_
#define SDRT_TENSOR_BACKEND_COPY_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/tensor/backend/index_math.h"

namespace sdrt::internal {

// Validates a strided copy (see StridedCopyHost) and returns its plan for these
// addresses; plan.numel == 0 for an empty copy, whose pointers may be null.
// InvalidArgument, prefixed with `op`, for: elem_size not in {1, 2, 4, 8, 16}; spans of
// different lengths; a negative size or stride; more than 2^63 - 1 elements or bytes
// spanned by either layout; more than kMaxCopyDims dims after merging; a null pointer
// for a non-empty copy.
absl::StatusOr<CopyPlan> PrepareStridedCopy(absl::string_view op, void* dst, const void* src,
                                            int64_t elem_size, absl::Span<const int64_t> sizes,
                                            absl::Span<const int64_t> dst_strides,
                                            absl::Span<const int64_t> src_strides);

// Validates a pad (see PadHost): InvalidArgument, prefixed with `op`, for a negative
// byte count, dst_bytes < src_bytes, or a null pointer with a nonzero byte count.
absl::Status ValidatePad(absl::string_view op, void* dst, int64_t dst_bytes, const void* src,
                         int64_t src_bytes);

// Validates an unshard (see UnshardHost) and returns its plan, vectorized for these
// addresses (VectorizeUnshardPlan); plan.pre * plan.n * plan.post == 0 for an empty
// full tensor, whose pointers may be null. InvalidArgument, prefixed with `op`, for:
// elem_size not in {1, 2, 4, 8, 16}; dim outside [0, rank); num_chunks <= 0; a negative
// size; a gathered buffer of more than 2^63 - 1 bytes; a null pointer for a non-empty
// tensor.
absl::StatusOr<UnshardPlan> PrepareUnshard(absl::string_view op, void* full, const void* gathered,
                                           int64_t elem_size, absl::Span<const int64_t> full_shape,
                                           int dim, int64_t num_chunks);

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_BACKEND_COPY_VALIDATION_H_
