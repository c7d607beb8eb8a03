// The GPU kernels against their host paths: the same random input through
// StridedCopyDevice and StridedCopyHost, compared byte for byte, destination bytes outside the copy
// included (both destinations start as the same random bytes); and through ConvertFloatsDevice
// and ConvertFloats for every pair of float dtypes (every code of a 8- or 16-bit source, edge
// values and random bits of a float32 one), element by element bit for bit (a NaN: NaN on both).
// Tests that need a device skip without one; the validation tests run anywhere, since
// arguments are checked before any CUDA call.
#include <cuda_runtime_api.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/cuda/kernels.h"
#include "sdrt/tensor/backend/strided_copy.h"
#include "sdrt/tensor/internal/float_cast.h"
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

constexpr DType kFloatDTypes[] = {DType::kFloat32,      DType::kBFloat16,   DType::kFloat16,
                                  DType::kFloat8E4M3FN, DType::kFloat8E5M2, DType::kFloat8E8M0FNU,
                                  DType::kFloat64};

// `count` source elements of `dtype`: every code in turn (all 256 or 65536) for a narrow
// dtype; for float32 the edges of the narrow formats (ties, their largest finite values and
// the magnitudes past them, subnormals, infinities, NaNs, signed zeros), values a model
// holds and random bits; for float64 the same, every other one a little off a float32.
std::vector<uint8_t> SourceElements(DType dtype, int64_t count, uint64_t seed) {
  const int64_t bytes = ElementBits(dtype) / 8;
  std::vector<uint8_t> out(static_cast<size_t>(count * bytes));
  if (bytes < 4) {
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t code = static_cast<uint16_t>(i + static_cast<int64_t>(seed));
      std::memcpy(out.data() + i * bytes, &code, static_cast<size_t>(bytes));
    }
    return out;
  }
  const std::vector<float> edges = {
      464.0f,     448.0f,      480.0f,    1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 65504.0f,
      65520.0f,   65519.99f,   57344.0f,  61440.0f,          61439.0f,          0x1p-24f,
      0x1p-25f,   0x1.8p-25f,  0x1p-9f,   0x1p-10f,          0x1.8p-10f,        0x1p-17f,
      0x1.8p+3f,  0x1.8p-130f, 0x1p-149f, 0x1.fffffep+127f,  0.0f,              -0.0f,
      INFINITY,   -INFINITY,   NAN,       -NAN,              0.1f,              -3.14159f};
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> model(-4.0f, 4.0f);
  const int64_t n = static_cast<int64_t>(edges.size());
  for (int64_t i = 0; i < count; ++i) {
    float f;
    if (i < 2 * n) {  // each edge, then its negation
      f = i < n ? edges[static_cast<size_t>(i)] : -edges[static_cast<size_t>(i - n)];
    } else if (i % 3 == 0) {
      f = model(gen);
    } else {
      const uint32_t bits = static_cast<uint32_t>(gen());
      std::memcpy(&f, &bits, sizeof(f));
    }
    if (bytes == 8) {  // float64: the same values, every other one a little off (two roundings)
      double d = i % 2 == 0 ? static_cast<double>(f) : static_cast<double>(f) * (1 + 0x1p-30);
      if (i >= 2 * n && i % 3 != 0) {
        const uint64_t bits = gen();
        std::memcpy(&d, &bits, sizeof(d));
      }
      std::memcpy(out.data() + i * 8, &d, 8);
      continue;
    }
    std::memcpy(out.data() + i * 4, &f, 4);
  }
  return out;
}

// The first element of `dtype` (at byte `offset` of both buffers, `count` of them) whose bits
// differ unless both are NaN, or a byte outside them that differs: its index (bytes outside
// count as elements -1 - their byte index); count when there is none.
int64_t FirstFloatMismatch(DType dtype, const std::vector<uint8_t>& got,
                           const std::vector<uint8_t>& want, int64_t offset, int64_t count) {
  const int64_t bytes = ElementBits(dtype) / 8;
  if (got.size() != want.size()) return -1;
  for (int64_t b = 0; b < static_cast<int64_t>(got.size()); ++b) {
    if ((b < offset || b >= offset + count * bytes) && got[b] != want[b]) return -1 - b;
  }
  for (int64_t i = 0; i < count; ++i) {
    const uint8_t* const g = got.data() + offset + i * bytes;
    const uint8_t* const w = want.data() + offset + i * bytes;
    if (std::memcmp(g, w, static_cast<size_t>(bytes)) == 0) continue;
    const bool both_nan = internal::VisitFloatDType(dtype, false, [&](auto d) {
      using Codec = internal::FloatCodec<decltype(d)::value>;
      typename Codec::Bits a, b;
      std::memcpy(&a, g, sizeof(a));
      std::memcpy(&b, w, sizeof(b));
      return std::isnan(Codec::Widen(a)) && std::isnan(Codec::Widen(b));
    });
    if (!both_nan) return i;
  }
  return count;
}

// `count` elements of `from` at `src_misalign` bytes past an aligned address converted into
// `to` at `dst_misalign` by ConvertFloatsDevice on `stream` and by ConvertFloats on the host.
void ExpectConvertMatchesHost(cudaStream_t stream, DType from, DType to, int64_t count,
                              int64_t src_misalign, int64_t dst_misalign, uint64_t seed = 3) {
  SCOPED_TRACE(testing::Message() << DTypeName(from) << " -> " << DTypeName(to) << ", " << count
                                  << " elements, misalign " << src_misalign << "/" << dst_misalign);
  const int64_t out_bytes = ElementBits(to) / 8;
  const std::vector<uint8_t> src = SourceElements(from, count, seed);
  // Both destinations start as the same bytes, with a margin of 16 bytes after the elements.
  std::vector<uint8_t> expected = HashByteVector(dst_misalign + count * out_bytes + 16, ~seed);
  DeviceBytes device_src(src, src_misalign);
  DeviceBytes device_dst(expected, 0);
  ASSERT_TRUE(internal::ConvertFloats(src.data(), from, expected.data() + dst_misalign, to, count));
  const absl::Status status = ConvertFloatsDevice(device_dst.data() + dst_misalign, to,
                                                  device_src.data(), from, count, stream);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(FirstFloatMismatch(to, device_dst.ToHost(), expected, dst_misalign, count), count);
}

// Every pair of float dtypes (the same dtype too: a copy) at addresses that give both group
// sizes of the plan and none (tensor/backend/convert_plan.h), over every code of a narrow
// source and a float32 source of edges, model values and random bits.
TEST_F(KernelsGpuTest, ConvertFloatsEveryDTypePairMatchesHost) {
  for (DType from : kFloatDTypes) {
    for (DType to : kFloatDTypes) {
      const int64_t count = ElementBits(from) == 8 ? 4 * 256 + 3 : 65536 + 5;
      for (const auto& [src_misalign, dst_misalign] : std::vector<std::pair<int64_t, int64_t>>{
               {0, 0}, {4, 2}, {2, 0}, {1, 3}, {3, 7}, {8, 12}}) {
        ExpectConvertMatchesHost(stream_, from, to, count, src_misalign, dst_misalign);
      }
      // A handful of elements: head and tail only.
      ExpectConvertMatchesHost(stream_, from, to, 3, 1, 1);
    }
  }
}

// Several sweeps of the persistent grid (2 Mi groups; an H200 holds about half a million
// units at once), on the legacy default stream too.
TEST_F(KernelsGpuTest, ConvertFloatsLarge) {
  const int64_t count = (int64_t{1} << 23) + 5;
  ExpectConvertMatchesHost(stream_, DType::kFloat32, DType::kBFloat16, count, 0, 0);
  ExpectConvertMatchesHost(nullptr, DType::kFloat8E4M3FN, DType::kFloat32, count, 1, 4);
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
  ExpectInvalid(ConvertFloatsDevice(a, DType::kInt32, b, DType::kFloat32, 4, nullptr),
                "ConvertFloatsDevice: no conversion from float32 to int32");
  ExpectInvalid(ConvertFloatsDevice(a, DType::kBFloat16, b, DType::kUInt16, 4, nullptr),
                "ConvertFloatsDevice: no conversion from uint16 to bfloat16");
  ExpectInvalid(ConvertFloatsDevice(a, DType::kBFloat16, b, DType::kFloat32, -1, nullptr),
                "ConvertFloatsDevice: count -1");
  ExpectInvalid(ConvertFloatsDevice(nullptr, DType::kBFloat16, b, DType::kFloat32, 4, nullptr),
                "ConvertFloatsDevice: null dst for 4 elements");
  EXPECT_TRUE(
      ConvertFloatsDevice(nullptr, DType::kBFloat16, nullptr, DType::kFloat32, 0, nullptr).ok());
}

}  // namespace
}  // namespace sdrt
