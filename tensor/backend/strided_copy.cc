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
#include "sdrt/tensor/backend/index_math.h"
#include "sdrt/tensor/status_macros.h"

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
  // PyTorch's copy_ refuses a destination with internal overlap; the host path would let
  // the last write win and the kernel an arbitrary one, so both refuse it here.
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] > 1 && dst_strides[d] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": dst has stride 0 on dim ", d, " of size ", sizes[d],
                       ", so several elements would be written to one location (dst_strides ",
                       Brackets(dst_strides), ")"));
    }
  }
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

}  // namespace internal

namespace {

// Runs `plan` one innermost run at a time: a memcpy when the run is contiguous in both
// layouts, else W-byte accesses (W constant, so each memcpy is a single move).
template <int64_t W>
void RunCopyPlan(const internal::CopyPlan& plan, char* dst, const char* src) {
  const int last = plan.ndim - 1;
  const int64_t inner = plan.ndim > 0 ? plan.sizes[last] : 1;
  const int64_t dst_step = plan.ndim > 0 ? plan.dst_strides[last] * W : W;
  const int64_t src_step = plan.ndim > 0 ? plan.src_strides[last] * W : W;
  const bool contiguous = dst_step == W && src_step == W;
  for (int64_t start = 0; start < plan.numel; start += inner) {
    const internal::CopyOffsets offsets = internal::CopyPlanOffsets<int64_t>(plan, start);
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
  SDRT_ASSIGN_OR_RETURN(internal::CopyPlan plan,
                        internal::PrepareStridedCopy("StridedCopyHost", dst, src, elem_size, sizes,
                                                     dst_strides, src_strides));
  if (plan.numel == 0) return absl::OkStatus();
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  switch (plan.width) {
    case 1:
      RunCopyPlan<1>(plan, d, s);
      break;
    case 2:
      RunCopyPlan<2>(plan, d, s);
      break;
    case 4:
      RunCopyPlan<4>(plan, d, s);
      break;
    case 8:
      RunCopyPlan<8>(plan, d, s);
      break;
    default:
      RunCopyPlan<16>(plan, d, s);
      break;
  }
  return absl::OkStatus();
}

}  // namespace sdrt
