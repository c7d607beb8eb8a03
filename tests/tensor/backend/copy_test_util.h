// Element sizes and layouts shared by the copy tests
// (tests/tensor/backend/strided_copy_test.cc and tests/cuda/kernels_gpu_test.cc). Header-only; test
// code only. Their random data is test::HashByteVector (tests/support/fill.h).
#ifndef SDRT_TESTS_TENSOR_BACKEND_COPY_TEST_UTIL_H_
#define SDRT_TESTS_TENSOR_BACKEND_COPY_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

namespace sdrt::test {

// Every element size the copy paths support, in bytes.
inline constexpr int64_t kElemSizes[] = {1, 2, 4, 8, 16};

inline int64_t Numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

inline std::vector<int64_t> ContiguousStrides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int d = static_cast<int>(sizes.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * sizes[d + 1];
  }
  return strides;
}

// Elements a layout spans from its origin: 1 + its largest offset, or 0 when empty.
inline int64_t Extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides) {
  if (Numel(sizes) == 0) return 0;
  int64_t extent = 1;
  for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * strides[d];
  return extent;
}

// One strided copy's layout, in elements.
struct Layout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> dst_strides;
  std::vector<int64_t> src_strides;
  int64_t src_offset = 0;  // From the src buffer's base to the copy's origin.
};

inline Layout Contiguous(const std::vector<int64_t>& sizes) {
  return {sizes, ContiguousStrides(sizes), ContiguousStrides(sizes)};
}

// A random slice (random start, step 1 or 2 per dim) of a random permutation of a
// contiguous 4-D tensor with dims in [1, max_dim], copied into a contiguous dst.
inline Layout RandomSlicedPermutation(std::mt19937_64& gen, int64_t max_dim) {
  std::vector<int64_t> base(4), perm = {0, 1, 2, 3};
  for (auto& s : base) s = 1 + static_cast<int64_t>(gen() % max_dim);
  std::shuffle(perm.begin(), perm.end(), gen);
  const std::vector<int64_t> base_strides = ContiguousStrides(base);
  Layout layout;
  for (int d = 0; d < 4; ++d) {
    const int64_t b = base[perm[d]];
    const int64_t start = static_cast<int64_t>(gen() % b);
    const int64_t step = 1 + static_cast<int64_t>(gen() % 2);
    layout.sizes.push_back((b - start + step - 1) / step);
    layout.src_strides.push_back(base_strides[perm[d]] * step);
    layout.src_offset += start * base_strides[perm[d]];
  }
  layout.dst_strides = ContiguousStrides(layout.sizes);
  return layout;
}

// Index of the first byte where `a` and `b` differ (the shorter length when one is a
// prefix of the other), or -1 when they are equal: a short failure message for
// buffers of many MB.
inline int64_t FirstMismatch(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  }
  return a.size() == b.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_TENSOR_BACKEND_COPY_TEST_UTIL_H_
