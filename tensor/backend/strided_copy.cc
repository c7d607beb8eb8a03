// Host paths of the copy kernels, and the validation the CUDA launchers share.
//
// The host paths are the oracle of the GPU tests, so they run the kernels' own index
// functions (tensor/backend/index_math.h); they differ only in iterating over innermost runs
// instead of single accesses, so that each contiguous run is one memcpy and a fully
// contiguous copy is a single memcpy.
#include "sdrt/tensor/backend/strided_copy.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/backend/copy_validation.h"
#include "sdrt/tensor/backend/index_math.h"

namespace sdrt {
namespace internal {
namespace {

bool ValidElemSize(int64_t elem_size) {
  return elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8 || elem_size == 16;
}

absl::Status ElemSizeError(absl::string_view op, int64_t elem_size) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": elem_size must be 1, 2, 4, 8 or 16 bytes, got ", elem_size));
}

std::string Brackets(absl::Span<const int64_t> values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// Bytes a layout spans, bounded above by elem_size * sum(size * stride): the bound
// BuildCopyPlan's preconditions need. False when it exceeds int64.
bool LayoutBytesFit(int64_t elem_size, absl::Span<const int64_t> sizes,
                    absl::Span<const int64_t> strides) {
  int64_t sum = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    int64_t term = 0;
    if (__builtin_mul_overflow(sizes[d], strides[d], &term) ||
        __builtin_mul_overflow(term, elem_size, &term) || __builtin_add_overflow(sum, term, &sum)) {
      return false;
    }
  }
  return true;
}

// Product of `values`, or false when it exceeds int64.
bool CheckedProduct(absl::Span<const int64_t> values, int64_t* product) {
  *product = 1;
  for (int64_t v : values) {
    if (__builtin_mul_overflow(*product, v, product)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<CopyPlan> PrepareStridedCopy(absl::string_view op, void* dst, const void* src,
                                            int64_t elem_size, absl::Span<const int64_t> sizes,
                                            absl::Span<const int64_t> dst_strides,
                                            absl::Span<const int64_t> src_strides) {
  if (!ValidElemSize(elem_size)) return ElemSizeError(op, elem_size);
  if (dst_strides.size() != sizes.size() || src_strides.size() != sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": sizes has ", sizes.size(),
                                                   " dims but dst_strides has ", dst_strides.size(),
                                                   " and src_strides has ", src_strides.size()));
  }
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dim ", d, " has size ", sizes[d], " (sizes ", Brackets(sizes), ")"));
    }
    if (dst_strides[d] < 0 || src_strides[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dim ", d, " has a negative stride (dst_strides ",
                       Brackets(dst_strides), ", src_strides ", Brackets(src_strides), ")"));
    }
  }
  int64_t numel = 0;
  if (!CheckedProduct(sizes, &numel)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": sizes ", Brackets(sizes), " hold more than 2^63 - 1 elements"));
  }
  CopyPlan plan;
  plan.ndim = 0;
  plan.width = 1;
  plan.numel = 0;
  if (numel == 0) return plan;
  for (const auto& [name, strides] :
       {std::pair{"dst", dst_strides}, std::pair{"src", src_strides}}) {
    if (!LayoutBytesFit(elem_size, sizes, strides)) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": the ", name, " layout (sizes ", Brackets(sizes), ", strides ", Brackets(strides),
          ", ", elem_size, "-byte elements) spans more than 2^63 - 1 bytes"));
    }
  }
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null ", dst == nullptr ? "dst" : "src",
                                                   " for a copy of ", numel, " elements"));
  }
  const int merged =
      BuildCopyPlan(elem_size, static_cast<int>(sizes.size()), sizes.data(), dst_strides.data(),
                    src_strides.data(), reinterpret_cast<uintptr_t>(dst),
                    reinterpret_cast<uintptr_t>(src), &plan);
  if (merged > kMaxCopyDims) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", merged, " dims remain after merging contiguous dims (sizes ",
                     Brackets(sizes), "); at most kMaxCopyDims = ", kMaxCopyDims));
  }
  return plan;
}

absl::Status ValidatePad(absl::string_view op, void* dst, int64_t dst_bytes, const void* src,
                         int64_t src_bytes) {
  if (src_bytes < 0 || dst_bytes < src_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": need 0 <= src_bytes <= dst_bytes, got src_bytes ", src_bytes,
                     ", dst_bytes ", dst_bytes));
  }
  if ((dst == nullptr && dst_bytes > 0) || (src == nullptr && src_bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null ", dst == nullptr ? "dst" : "src",
                                                   " with dst_bytes ", dst_bytes, ", src_bytes ",
                                                   src_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<UnshardPlan> PrepareUnshard(absl::string_view op, void* full, const void* gathered,
                                           int64_t elem_size, absl::Span<const int64_t> full_shape,
                                           int dim, int64_t num_chunks) {
  if (!ValidElemSize(elem_size)) return ElemSizeError(op, elem_size);
  const int rank = static_cast<int>(full_shape.size());
  if (dim < 0 || dim >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", dim, " is out of range for the ",
                                                   rank, "-dim shape ", Brackets(full_shape)));
  }
  if (num_chunks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": num_chunks must be positive, got ", num_chunks));
  }
  for (int d = 0; d < rank; ++d) {
    if (full_shape[d] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", d, " has size ", full_shape[d],
                                                     " (full_shape ", Brackets(full_shape), ")"));
    }
  }
  // The gathered buffer has the full shape with n replaced by num_chunks * chunk >= n,
  // so its byte size bounds every index and byte offset of the mapping.
  const int64_t n = full_shape[dim];
  const int64_t chunk = n / num_chunks + (n % num_chunks != 0 ? 1 : 0);
  int64_t gathered_bytes = 0;
  if (!CheckedProduct(full_shape.subspan(0, dim), &gathered_bytes) ||
      __builtin_mul_overflow(gathered_bytes, num_chunks, &gathered_bytes) ||
      __builtin_mul_overflow(gathered_bytes, chunk, &gathered_bytes) ||
      __builtin_mul_overflow(gathered_bytes, elem_size, &gathered_bytes)) {
    gathered_bytes = -1;
  }
  int64_t post = 0;
  if (gathered_bytes < 0 || !CheckedProduct(full_shape.subspan(dim + 1), &post) ||
      __builtin_mul_overflow(gathered_bytes, post, &gathered_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": the gathered buffer of ", num_chunks, " chunks of full_shape ",
                     Brackets(full_shape), " split along dim ", dim, " exceeds 2^63 - 1 bytes"));
  }
  UnshardPlan plan = MakeUnshardPlan(elem_size, full_shape.data(), rank, dim, num_chunks);
  if (plan.pre * plan.n * plan.post == 0) return plan;
  if (full == nullptr || gathered == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": null ",
                                                   full == nullptr ? "full" : "gathered",
                                                   " for full_shape ", Brackets(full_shape)));
  }
  return VectorizeUnshardPlan(plan, reinterpret_cast<uintptr_t>(full),
                              reinterpret_cast<uintptr_t>(gathered));
}

}  // namespace internal

namespace {

// Runs `plan` one innermost run at a time: a memcpy when the run is contiguous in both
// layouts, else W-byte accesses (W constant, so each memcpy is a single move).
template <int64_t W>
void RunCopyPlan(const CopyPlan& plan, char* dst, const char* src) {
  const int last = plan.ndim - 1;
  const int64_t inner = plan.ndim > 0 ? plan.sizes[last] : 1;
  const int64_t dst_step = plan.ndim > 0 ? plan.dst_strides[last] * W : W;
  const int64_t src_step = plan.ndim > 0 ? plan.src_strides[last] * W : W;
  const bool contiguous = dst_step == W && src_step == W;
  for (int64_t start = 0; start < plan.numel; start += inner) {
    const CopyOffsets offsets = CopyPlanOffsets<int64_t>(plan, start);
    char* d = dst + offsets.dst * W;
    const char* s = src + offsets.src * W;
    if (contiguous) {
      std::memcpy(d, s, inner * W);
      continue;
    }
    for (int64_t k = 0; k < inner; ++k, d += dst_step, s += src_step) std::memcpy(d, s, W);
  }
}

}  // namespace

absl::Status StridedCopyHost(void* dst, const void* src, int64_t elem_size,
                             absl::Span<const int64_t> sizes, absl::Span<const int64_t> dst_strides,
                             absl::Span<const int64_t> src_strides) {
  absl::StatusOr<CopyPlan> plan = internal::PrepareStridedCopy(
      "StridedCopyHost", dst, src, elem_size, sizes, dst_strides, src_strides);
  if (!plan.ok()) return plan.status();
  if (plan->numel == 0) return absl::OkStatus();
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  switch (plan->width) {
    case 1:
      RunCopyPlan<1>(*plan, d, s);
      break;
    case 2:
      RunCopyPlan<2>(*plan, d, s);
      break;
    case 4:
      RunCopyPlan<4>(*plan, d, s);
      break;
    case 8:
      RunCopyPlan<8>(*plan, d, s);
      break;
    default:
      RunCopyPlan<16>(*plan, d, s);
      break;
  }
  return absl::OkStatus();
}

absl::Status PadHost(void* dst, int64_t dst_bytes, const void* src, int64_t src_bytes) {
  absl::Status status = internal::ValidatePad("PadHost", dst, dst_bytes, src, src_bytes);
  if (!status.ok()) return status;
  if (src_bytes > 0) std::memcpy(dst, src, src_bytes);
  if (dst_bytes > src_bytes)
    std::memset(static_cast<char*>(dst) + src_bytes, 0, dst_bytes - src_bytes);
  return absl::OkStatus();
}

absl::Status UnshardHost(void* full, const void* gathered, int64_t elem_size,
                         absl::Span<const int64_t> full_shape, int dim, int64_t num_chunks) {
  absl::StatusOr<UnshardPlan> plan = internal::PrepareUnshard(
      "UnshardHost", full, gathered, elem_size, full_shape, dim, num_chunks);
  if (!plan.ok()) return plan.status();
  const UnshardPlan& u = *plan;
  if (u.pre * u.n * u.post == 0) return absl::OkStatus();
  // Rows [r * chunk, r * chunk + rows) of one p are contiguous in both buffers.
  char* f = static_cast<char*>(full);
  const char* g = static_cast<const char*>(gathered);
  const int64_t row_bytes = u.post * u.width;
  for (int64_t p = 0; p < u.pre; ++p) {
    for (int64_t j = 0; j < u.n; j += u.chunk) {
      const int64_t rows = std::min(u.chunk, u.n - j);
      const int64_t full_index = (p * u.n + j) * u.post;
      std::memcpy(f + full_index * u.width,
                  g + UnshardSourceIndex<int64_t>(u, full_index) * u.width, rows * row_bytes);
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt
