// Index arithmetic of sdrt's copy kernels, compiled for the host and the GPU.
//
// The CPU paths (tensor/backend/strided_copy.cc) and the CUDA kernels (cuda/kernels.cu) call
// the same functions below, so the CPU result is the oracle for the GPU result and
// the arithmetic is tested on any machine.
//
// Note [Copy plans]: a strided copy is first simplified on the host into a CopyPlan:
//   1. size-1 dims are dropped and adjacent dims that are contiguous in BOTH src and
//      dst are merged (at element granularity; at most kMaxCopyDims may remain);
//   2. the bytes of one element become an innermost dim of stride 1, merged with the
//      innermost dim when that dim is contiguous in both;
//   3. the access width w is the widest of {16, 8, 4, 2, 1} bytes that divides both base
//      addresses, every byte stride and the byte length of a contiguous innermost dim;
//   4. the plan is re-expressed in units of w (a dim that becomes size 1 is dropped).
// Step 2 lets w exceed the element size (a contiguous run of bf16 moves in 16-byte
// accesses) and fall below it (an 8-byte element at a 4-byte aligned address, as in an
// mmap'd safetensors file, moves in two 4-byte accesses) with one rule. Every offset
// is int64: shards of many GB have offsets beyond 2^31 elements and bytes.
//
// This header has no CUDA or absl dependencies; every function is constexpr or inline.
// Not API: plumbing shared across folders, in namespace sdrt::internal (hidden, never in
// libsdrt.so's exported symbols).
#ifndef SDRT_TENSOR_BACKEND_INDEX_MATH_H_
#define SDRT_TENSOR_BACKEND_INDEX_MATH_H_

#include <cstdint>

#if defined(__CUDACC__)
#define SDRT_HD __host__ __device__
#else
#define SDRT_HD
#endif

namespace sdrt::internal {

// Most dims a copy may have after adjacent contiguous dims are merged.
inline constexpr int kMaxCopyDims = 12;

// Dims a CopyPlan can hold: kMaxCopyDims element dims plus the split of a misaligned
// element into narrower accesses (Note [Copy plans], step 2).
inline constexpr int kCopyPlanCapacity = kMaxCopyDims + 1;

// The widest access width in {16, 8, 4, 2, 1} bytes dividing `bits`, the OR of every
// address, stride and length (all in bytes) that must be a multiple of it.
SDRT_HD constexpr int64_t WidestAccessWidth(uint64_t bits) {
  return bits % 16 == 0 ? 16 : bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : bits % 2 == 0 ? 2 : 1;
}

// A simplified strided copy (Note [Copy plans]). Plain data: passed to kernels by value.
// Access a (a linear index in [0, numel), innermost dim fastest) reads `width` bytes at
// src + width * CopyPlanOffsets(plan, a).src and writes them at the dst offset.
struct CopyPlan {
  int ndim;       // dims after simplification, innermost last; 0 for a single access.
  int64_t width;  // bytes per access: 1, 2, 4, 8 or 16.
  int64_t numel;  // accesses, the product of sizes; 0 for an empty copy.
  int64_t sizes[kCopyPlanCapacity];
  int64_t dst_strides[kCopyPlanCapacity];  // in accesses (units of width).
  int64_t src_strides[kCopyPlanCapacity];  // in accesses (units of width).
};

// Builds the plan of a strided copy of `ndim` dims (sizes and strides in elements of
// `elem_size` bytes) between the given base addresses. Preconditions, checked by the
// callers' validation: sizes and strides >= 0, elem_size in {1, 2, 4, 8, 16}, and every
// size * stride * elem_size and their sums fit in int64.
// Returns the number of element dims left after step 1; when it exceeds kMaxCopyDims
// the plan is not built. An empty copy (some size 0) returns 0 with plan->numel = 0.
inline int BuildCopyPlan(int64_t elem_size, int ndim, const int64_t* sizes,
                         const int64_t* dst_strides, const int64_t* src_strides,
                         uintptr_t dst_address, uintptr_t src_address, CopyPlan* plan) {
  CopyPlan& p = *plan;
  p.ndim = 0;
  p.width = 1;
  p.numel = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 0) return 0;
  }
  // Step 1. The dim being grown by merges is kept aside, so that dims past the capacity
  // are still counted correctly.
  int merged = 0;
  int64_t size = 1, dst = 0, src = 0;
  for (int d = 0; d < ndim; ++d) {
    if (sizes[d] == 1) continue;
    if (size > 1 && dst == dst_strides[d] * sizes[d] && src == src_strides[d] * sizes[d]) {
      size *= sizes[d];
    } else {
      if (size > 1 && merged < kMaxCopyDims) {
        p.sizes[merged] = size;
        p.dst_strides[merged] = dst;
        p.src_strides[merged] = src;
      }
      if (size > 1) ++merged;
      size = sizes[d];
    }
    dst = dst_strides[d];
    src = src_strides[d];
  }
  if (size > 1) {
    if (merged < kMaxCopyDims) {
      p.sizes[merged] = size;
      p.dst_strides[merged] = dst;
      p.src_strides[merged] = src;
    }
    ++merged;
  }
  if (merged > kMaxCopyDims) return merged;

  // Step 2, in bytes. Afterwards the innermost dim is contiguous in both, n >= 1.
  int n = merged;
  for (int d = 0; d < n; ++d) {
    p.dst_strides[d] *= elem_size;
    p.src_strides[d] *= elem_size;
  }
  if (n > 0 && p.dst_strides[n - 1] == elem_size && p.src_strides[n - 1] == elem_size) {
    p.sizes[n - 1] *= elem_size;
  } else {
    // Also for elem_size 1: the size-1 byte dim then forces w = 1 below, which a
    // non-contiguous innermost dim (or a single byte) needs.
    p.sizes[n] = elem_size;
    ++n;
  }
  p.dst_strides[n - 1] = 1;
  p.src_strides[n - 1] = 1;

  // Step 3.
  uint64_t bits = dst_address | src_address | static_cast<uint64_t>(p.sizes[n - 1]);
  for (int d = 0; d < n - 1; ++d) {
    bits |= static_cast<uint64_t>(p.dst_strides[d]) | static_cast<uint64_t>(p.src_strides[d]);
  }
  const int64_t w = WidestAccessWidth(bits);

  // Step 4.
  p.sizes[n - 1] /= w;
  for (int d = 0; d < n - 1; ++d) {
    p.dst_strides[d] /= w;
    p.src_strides[d] /= w;
  }
  if (p.sizes[n - 1] == 1) --n;
  p.ndim = n;
  p.width = w;
  p.numel = 1;
  for (int d = 0; d < n; ++d) p.numel *= p.sizes[d];
  return merged;
}

// Offsets of one access, in units of the plan's width.
struct CopyOffsets {
  int64_t dst;
  int64_t src;
};

// Maps access `linear` (0 <= linear < plan.numel) to its dst and src offsets by div/mod
// over the sizes, innermost first. IndexT is the type of the div/mod: the kernels use
// uint32_t when numel fits in int32 (32-bit division is several times cheaper on the
// GPU) and int64_t otherwise; the offsets are int64 either way.
template <typename IndexT>
SDRT_HD inline CopyOffsets CopyPlanOffsets(const CopyPlan& plan, IndexT linear) {
  CopyOffsets offsets{0, 0};
  // The outermost dim needs no division: what is left of `linear` is its index.
  for (int d = plan.ndim - 1; d > 0; --d) {
    const IndexT size = static_cast<IndexT>(plan.sizes[d]);
    const int64_t i = static_cast<int64_t>(linear % size);
    linear /= size;
    offsets.dst += i * plan.dst_strides[d];
    offsets.src += i * plan.src_strides[d];
  }
  if (plan.ndim > 0) {
    offsets.dst += static_cast<int64_t>(linear) * plan.dst_strides[0];
    offsets.src += static_cast<int64_t>(linear) * plan.src_strides[0];
  }
  return offsets;
}

}  // namespace sdrt::internal

#endif  // SDRT_TENSOR_BACKEND_INDEX_MATH_H_
