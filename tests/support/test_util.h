// Helpers shared by the tests of several folders: a tensor builder and the folder tests
// write into. Header-only; test code only.
#ifndef SDRT_TESTS_SUPPORT_TEST_UTIL_H_
#define SDRT_TESTS_SUPPORT_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::test {

// A contiguous CPU tensor of `shape` holding start, start + 1, ... in row-major order.
// `dtype` is float32, int32 or int64.
inline Tensor Arange(IntSpan shape, DType dtype = DType::kFloat32, int64_t start = 0) {
  Tensor t = *Tensor::Empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (dtype) {
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(start + i);
        break;
      case DType::kInt32:
        t.data<int32_t>()[i] = static_cast<int32_t>(start + i);
        break;
      case DType::kInt64:
        t.data<int64_t>()[i] = start + i;
        break;
      default:
        ADD_FAILURE() << "Arange: unsupported dtype " << DTypeName(dtype);
        return t;
    }
  }
  return t;
}

// The folder tests write files into: $SDRT_TEST_TMP (the tests build folder under CTest),
// else GoogleTest's TempDir().
inline std::string TestTmpRoot() {
  const char* root = std::getenv("SDRT_TEST_TMP");
  return root != nullptr ? root : ::testing::TempDir();
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_TEST_UTIL_H_
