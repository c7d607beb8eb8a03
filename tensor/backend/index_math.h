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
// This header has no CUDA or absl dependencies of its own beyond strided_copy.h's
// constant; every function is constexpr or inline.
#ifndef SDRT_TENSOR_BACKEND_INDEX_MATH_H_
#define SDRT_TENSOR_BACKEND_INDEX_MATH_H_

#include <cstdint>

#include "sdrt/tensor/backend/strided_copy.h"

#if defined(__CUDACC__)
#define SDRT_HD __host__ __device__
#else
#define SDRT_HD
#endif

namespace sdrt {

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

// Unshard as a (pre, n, post) view: the full tensor is contiguous [pre, n, post] with n
// the sharded dim; the gathered buffer holds num_chunks contiguous chunks of shape
// [pre, chunk, post], chunk = ceil(n / num_chunks), rows past n being padding. Units
// are accesses of `width` bytes (post is scaled by VectorizeUnshardPlan).
struct UnshardPlan {
  int64_t pre;         // product of the full shape's dims before the sharded dim.
  int64_t n;           // the sharded dim's full size.
  int64_t post;        // product of the dims after it, in units of width.
  int64_t chunk;       // rows of the sharded dim per chunk, ceil(n / num_chunks).
  int64_t num_chunks;  // chunks (ranks) in the gathered buffer.
  int64_t width;       // bytes per unit.
};

// The plan of an unshard in element units. Preconditions (checked by the callers'
// validation): 0 <= dim < rank, shape entries >= 0, num_chunks > 0, and the gathered
// buffer's byte size num_chunks * pre * chunk * post * elem_size fits in int64.
inline UnshardPlan MakeUnshardPlan(int64_t elem_size, const int64_t* full_shape, int rank, int dim,
                                   int64_t num_chunks) {
  UnshardPlan plan{1, full_shape[dim], 1, 0, num_chunks, elem_size};
  for (int d = 0; d < dim; ++d) plan.pre *= full_shape[d];
  for (int d = dim + 1; d < rank; ++d) plan.post *= full_shape[d];
  plan.chunk = plan.n / num_chunks + (plan.n % num_chunks != 0 ? 1 : 0);  // No overflow.
  return plan;
}

// Reinterprets `plan` in units of the widest access width dividing a row's byte length
// (post * width) and both base addresses. Every offset of the mapping is a multiple of
// post, so the mapping is unchanged apart from the unit.
inline UnshardPlan VectorizeUnshardPlan(UnshardPlan plan, uintptr_t full_address,
                                        uintptr_t gathered_address) {
  const int64_t row_bytes = plan.post * plan.width;
  const int64_t w =
      WidestAccessWidth(static_cast<uint64_t>(row_bytes) | full_address | gathered_address);
  plan.post = row_bytes / w;
  plan.width = w;
  return plan;
}

// Gathered index of the full tensor's element `full_index`, row-major over [pre, n, post]
// (0 <= full_index < pre * n * post): with full_index = (p * n + j) * post + q,
//   full[p, j, q] = gathered[(j / chunk) * pre*chunk*post + p*chunk*post + (j % chunk)*post + q].
// IndexT is the type of the div/mod, as in CopyPlanOffsets; the result is int64 (the
// gathered buffer is larger than the full tensor by its padding).
template <typename IndexT>
SDRT_HD inline int64_t UnshardSourceIndex(const UnshardPlan& plan, IndexT full_index) {
  const IndexT post = static_cast<IndexT>(plan.post);
  const IndexT n = static_cast<IndexT>(plan.n);
  const IndexT chunk = static_cast<IndexT>(plan.chunk);
  const IndexT q = full_index % post;
  const IndexT pj = full_index / post;
  const IndexT j = pj % n;
  const IndexT p = pj / n;
  const int64_t row = plan.chunk * plan.post;
  return static_cast<int64_t>(j / chunk) * plan.pre * row + static_cast<int64_t>(p) * row +
         static_cast<int64_t>(j % chunk) * plan.post + static_cast<int64_t>(q);
}

}  // namespace sdrt

#endif  // SDRT_TENSOR_BACKEND_INDEX_MATH_H_
