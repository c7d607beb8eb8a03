// Helpers shared by the tests of several folders (test code only): every dtype, the skip of
// tests that need a CUDA device, the folder tests write into, and the deterministic fills
// (fill.h).
#ifndef SDRT_TESTS_SUPPORT_TEST_UTIL_H_
#define SDRT_TESTS_SUPPORT_TEST_UTIL_H_

#include <array>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {

// Every dtype, in the order of SDRT_DTYPE_TABLE (tensor/dtype.h), generated from that
// table so that a dtype added there is covered by every test that loops over this.
inline constexpr DType kAllDTypes[] = {
#define SDRT_TEST_DTYPE_LIST(e, name, st, bits, dl_code, reduce, cast) DType::k##e,
    SDRT_DTYPE_TABLE(SDRT_TEST_DTYPE_LIST)
#undef SDRT_TEST_DTYPE_LIST
};
static_assert(sizeof(kAllDTypes) / sizeof(kAllDTypes[0]) == kNumDTypes,
              "kAllDTypes lists every dtype of the table");

// The dtypes of kAllDTypes whose elements are whole bytes (all but F4 and F6_*), in table
// order: for the tests whose shapes (odd sizes, uneven shards) or element-wise checks need
// addressable elements. The sub-byte dtypes have tests of their own.
inline constexpr int kNumWholeByteDTypes = [] {
  int n = 0;
  for (DType d : kAllDTypes) n += IsSubByte(d) ? 0 : 1;
  return n;
}();
inline constexpr std::array<DType, kNumWholeByteDTypes> kWholeByteDTypes = [] {
  std::array<DType, kNumWholeByteDTypes> out{};
  size_t i = 0;
  for (DType d : kAllDTypes) {
    if (!IsSubByte(d)) out[i++] = d;
  }
  return out;
}();

// The folder tests write files into: $SDRT_TEST_TMP (the tests build folder under CTest),
// else GoogleTest's TempDir().
inline std::string TestTmpRoot() {
  const char* root = std::getenv("SDRT_TEST_TMP");
  return root != nullptr ? root : ::testing::TempDir();
}

}  // namespace sdrt::test

// Skips the current test (or, in SetUp, the fixture's tests) when no CUDA device can be
// used: in a build without CUDA, or on a machine without a GPU; the message says why.
#define SDRT_SKIP_WITHOUT_GPU()                                                \
  do {                                                                         \
    if (::sdrt::CudaDeviceCount() == 0) {                                      \
      GTEST_SKIP() << "no CUDA device: " << ::sdrt::CudaAvailable().message(); \
    }                                                                          \
  } while (0)

#endif  // SDRT_TESTS_SUPPORT_TEST_UTIL_H_
