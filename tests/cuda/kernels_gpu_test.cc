// The GPU copy kernel against its host path: the same random input through
// StridedCopyDevice and StridedCopyHost, compared byte for byte, destination bytes outside the copy
// included (both destinations start as the same random bytes). Tests that need a device skip
// without one; the validation tests run anywhere, since arguments are checked before any CUDA call.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tests/support/test_util.h"
#include "sdrt/tests/tensor/backend/copy_test_util.h"

namespace sdrt {
namespace {

using ::sdrt::test::Contiguous;
using ::sdrt::test::ContiguousStrides;
using ::sdrt::test::Extent;
using ::sdrt::test::FirstMismatch;
using ::sdrt::test::HashByteVector;
using ::sdrt::test::kElemSizes;
using ::sdrt::test::Layout;
using ::sdrt::test::Numel;
using ::testing::HasSubstr;

constexpr int64_t kMiB = int64_t{1} << 20;

#define ASSERT_CUDA(expr) \
  ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

class KernelsGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SDRT_SKIP_WITHOUT_GPU();
    ASSERT_CUDA(cudaStreamCreate(&stream_));
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

// Device memory holding `bytes` at `misalign` bytes past a 256-byte aligned address.
class DeviceBytes {
 public:
  DeviceBytes(const std::vector<uint8_t>& contents, int64_t misalign)
      : misalign_(misalign), size_(static_cast<int64_t>(contents.size())) {
    EXPECT_EQ(cudaMalloc(&base_, size_ + misalign_ + 1), cudaSuccess);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(data(), contents.data(), size_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBytes() { cudaFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;

  uint8_t* data() { return static_cast<uint8_t*>(base_) + misalign_; }
  std::vector<uint8_t> ToHost() {
    std::vector<uint8_t> out(size_);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), data(), size_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* base_ = nullptr;
  int64_t misalign_;
  int64_t size_;
};

void ExpectStridedCopyMatchesHost(cudaStream_t stream, int64_t elem_size, const Layout& l,
                                  int64_t dst_misalign = 0, int64_t src_misalign = 0,
                                  uint64_t seed = 1) {
  SCOPED_TRACE(testing::Message() << "elem_size " << elem_size << " sizes "
                                  << testing::PrintToString(l.sizes) << " src_strides "
                                  << testing::PrintToString(l.src_strides) << " misalign "
                                  << dst_misalign << "/" << src_misalign);
  const std::vector<uint8_t> src =
      HashByteVector((l.src_offset + Extent(l.sizes, l.src_strides)) * elem_size, seed);
  std::vector<uint8_t> expected = HashByteVector(Extent(l.sizes, l.dst_strides) * elem_size, ~seed);
  DeviceBytes device_src(src, src_misalign);
  DeviceBytes device_dst(expected, dst_misalign);
  const int64_t offset = l.src_offset * elem_size;
  ASSERT_TRUE(StridedCopyHost(expected.data(), src.data() + offset, elem_size, l.sizes,
                              l.dst_strides, l.src_strides)
                  .ok());
  const absl::Status status =
      StridedCopyDevice(device_dst.data(), device_src.data() + offset, elem_size, l.sizes,
                        l.dst_strides, l.src_strides, stream);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(FirstMismatch(device_dst.ToHost(), expected), -1);
}

TEST_F(KernelsGpuTest, StridedCopyAwkwardLayouts) {
  const std::vector<Layout> layouts = {
      Contiguous({33, 17, 2, 1}),
      Contiguous({}),
      Contiguous({1000003}),
      Contiguous({3, 0, 5}),
      {{17, 33}, {33, 1}, {1, 17}},                      // Transposed source.
      {{6, 4, 5}, {20, 5, 1}, {1, 30, 6}},               // Permuted source.
      {{17, 33}, {1, 17}, {33, 1}},                      // Transposed destination.
      {{18, 9, 3}, {27, 3, 1}, {180, 9, 1}, 285},        // x[3::2, 5::3, :].
      {{33, 9, 2, 1}, {18, 2, 1, 1}, {34, 2, 1, 1}, 8},  // x.narrow(1, 4, 9).
      {{7, 5}, {5, 1}, {0, 1}},                          // Broadcast rows.
  };
  for (int64_t elem_size : kElemSizes) {
    for (const Layout& layout : layouts) {
      for (const auto& [dst_misalign, src_misalign] :
           std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 0}, {4, 12}, {8, 2}}) {
        ExpectStridedCopyMatchesHost(stream_, elem_size, layout, dst_misalign, src_misalign);
      }
    }
  }
}

TEST_F(KernelsGpuTest, StridedCopyTwelveDimsAndDefaultStream) {
  std::vector<int64_t> sizes(12, 2), reversed(12);
  for (int d = 0; d < 12; ++d) reversed[d] = int64_t{1} << d;
  for (int64_t elem_size : kElemSizes) {
    ExpectStridedCopyMatchesHost(nullptr, elem_size, {sizes, ContiguousStrides(sizes), reversed});
  }
}

TEST_F(KernelsGpuTest, StridedCopyRandomLayouts) {
  std::mt19937_64 gen(77);
  for (int trial = 0; trial < 100; ++trial) {
    const Layout layout = test::RandomSlicedPermutation(gen, 9);
    ExpectStridedCopyMatchesHost(stream_, kElemSizes[gen() % 5], layout,
                                 static_cast<int64_t>(gen() % 16), static_cast<int64_t>(gen() % 16),
                                 gen());
  }
}

TEST_F(KernelsGpuTest, StridedCopyLarge) {
  // 64 MiB out of a [8192, 4096] float32 tensor: rows [2048, 6144) (one contiguous
  // block), columns [1000, 3048) (8 KiB runs), and a bf16 transpose.
  ExpectStridedCopyMatchesHost(stream_, 4, {{4096, 4096}, {4096, 1}, {4096, 1}, 2048 * 4096});
  ExpectStridedCopyMatchesHost(stream_, 4, {{8192, 2048}, {2048, 1}, {4096, 1}, 1000});
  ExpectStridedCopyMatchesHost(stream_, 2, {{4096, 8192}, {8192, 1}, {1, 4096}});
}

TEST_F(KernelsGpuTest, StridedCopyBeyondInt32Accesses) {
  // 2^31 + 4099 bytes with a 1-byte aligned dst: 1-byte accesses, more than INT32_MAX of
  // them, so the kernel takes its 64-bit index path.
  const int64_t bytes = (int64_t{1} << 31) + 4099;
  ExpectStridedCopyMatchesHost(stream_, 1, Contiguous({bytes}), 1, 0);
}

TEST_F(KernelsGpuTest, StridedCopyFromPinnedHostMemory) {
  const std::vector<int64_t> sizes = {300, 70};
  const std::vector<int64_t> src_strides = {100, 1};
  const std::vector<uint8_t> src = HashByteVector(300 * 100 * 4, 5);
  void* pinned = nullptr;
  ASSERT_CUDA(cudaHostAlloc(&pinned, src.size(), cudaHostAllocDefault));
  std::memcpy(pinned, src.data(), src.size());
  std::vector<uint8_t> expected(300 * 70 * 4);
  ASSERT_TRUE(StridedCopyHost(expected.data(), src.data() + 12, 4, sizes, ContiguousStrides(sizes),
                              src_strides)
                  .ok());
  DeviceBytes dst(HashByteVector(expected.size(), 6), 0);
  const absl::Status status =
      StridedCopyDevice(dst.data(), static_cast<uint8_t*>(pinned) + 12, 4, sizes,
                        ContiguousStrides(sizes), src_strides, stream_);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(FirstMismatch(dst.ToHost(), expected), -1);
  cudaFreeHost(pinned);
}

// A launch reports its own status: an error an earlier, unchecked call left behind
// (here a failed cudaMalloc) is not returned by the next copy.
TEST_F(KernelsGpuTest, LaunchAfterAnUnrelatedErrorIsOk) {
  void* ptr = nullptr;
  ASSERT_EQ(cudaMalloc(&ptr, size_t{1} << 62), cudaErrorMemoryAllocation);  // left set
  ExpectStridedCopyMatchesHost(stream_, 4, {{17, 33}, {33, 1}, {1, 17}});
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);  // still there: not ours to eat
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

// No fixture: validation and empty copies touch no CUDA API, so this runs anywhere.
TEST(KernelsValidationTest, DeviceCallsValidateBeforeLaunching) {
  uint8_t a[64], b[64];
  ExpectInvalid(StridedCopyDevice(a, b, 4, {2, 3, -1}, {3, 1, 1}, {3, 1, 1}, nullptr),
                "StridedCopyDevice: dim 2 has size -1");
  ExpectInvalid(StridedCopyDevice(a, b, 3, {2}, {1}, {1}, nullptr),
                "StridedCopyDevice: elem_size must be 1, 2, 4, 8 or 16 bytes, got 3");
  EXPECT_TRUE(StridedCopyDevice(nullptr, nullptr, 4, {3, 0}, {0, 1}, {0, 1}, nullptr).ok());
  // An aliased destination is refused as the host path refuses it (strided_copy_test.cc).
  ExpectInvalid(StridedCopyDevice(a, b, 4, {3, 2}, {0, 1}, {2, 1}, nullptr),
                "StridedCopyDevice: dst has stride 0 on dim 0 of size 3");
}

}  // namespace
}  // namespace sdrt
