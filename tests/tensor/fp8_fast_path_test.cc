// The vectorized paths of tensor/internal/fp8_scale.cc against the element-by-element ones
// they replace (float_cast.h's conversions, which fp8_scale_golden_test holds to PyTorch):
// QuantizeFloats of float32 and bfloat16 into float8_e4m3fn, and AbsMax, on every bfloat16
// bit pattern and on float32 bit patterns spread over the whole range (a stride through
// all 2^32 plus the neighbourhoods of every power of two, where rounding carries), NaN and
// infinities included.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tensor/internal/fp8_scale.h"

namespace sdrt::internal {
namespace {

// The codes of `x` / `scale` one element at a time, through float_cast.h.
std::vector<uint8_t> Reference(const std::vector<float>& x, float scale) {
  std::vector<uint8_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = FloatToFloat8E4M3FN(x[i] / scale);
  return out;
}

std::vector<float> Float32Patterns() {
  std::vector<float> x;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65537) {
    x.push_back(FloatFromBits(static_cast<uint32_t>(b)));
  }
  for (uint32_t e = 0; e < 256; ++e) {
    for (int32_t d = -300; d <= 300; ++d) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        x.push_back(FloatFromBits(sign | static_cast<uint32_t>(static_cast<int64_t>(e << 23) + d)));
      }
    }
  }
  return x;
}

TEST(Fp8FastPath, Float32IntoE4M3MatchesTheElementwiseConversion) {
  const std::vector<float> x = Float32Patterns();
  for (float scale : {1.0f, 0.5f, 3.0f, 1.0f / 448.0f, 7.3e-5f}) {
    std::vector<uint8_t> got(x.size());
    ASSERT_TRUE(QuantizeFloats(x.data(), DType::kFloat32, got.data(), DType::kFloat8E4M3FN, scale,
                               static_cast<int64_t>(x.size())));
    const std::vector<uint8_t> want = Reference(x, scale);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "bits " << std::hex << FloatBits(x[i]) << " scale " << scale;
    }
  }
}

TEST(Fp8FastPath, EveryBFloat16IntoE4M3MatchesTheElementwiseConversion) {
  std::vector<uint16_t> bits(65536);
  std::vector<float> x(65536);
  for (uint32_t b = 0; b < 65536; ++b) {
    bits[b] = static_cast<uint16_t>(b);
    x[b] = FloatFromBits(b << 16);
  }
  for (float scale : {1.0f, 0.25f, 1.5f, 1e-3f, 1e30f}) {
    std::vector<uint8_t> got(bits.size());
    ASSERT_TRUE(QuantizeFloats(bits.data(), DType::kBFloat16, got.data(), DType::kFloat8E4M3FN,
                               scale, 65536));
    const std::vector<uint8_t> want = Reference(x, scale);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "bfloat16 " << std::hex << i << " scale " << scale;
    }
  }
}

TEST(Fp8FastPath, AbsMaxIsTheLargestMagnitudeAndKeepsNaN) {
  std::vector<uint16_t> b = {0x3f80, 0xc040, 0x0001, 0x8000};  // 1, -3, tiny, -0
  float amax = 0.0f;
  ASSERT_TRUE(AbsMax(b.data(), DType::kBFloat16, 4, &amax));
  EXPECT_EQ(amax, 3.0f);
  b.push_back(0xff80);  // -inf
  ASSERT_TRUE(AbsMax(b.data(), DType::kBFloat16, 5, &amax));
  EXPECT_TRUE(std::isinf(amax));
  b.push_back(0x7fc1);  // NaN: the element-by-element path, which returns it
  ASSERT_TRUE(AbsMax(b.data(), DType::kBFloat16, 6, &amax));
  EXPECT_TRUE(std::isnan(amax));
  const std::vector<float> f = {-0.0f, 2.5f, -7.25f, 1e-40f};
  ASSERT_TRUE(AbsMax(f.data(), DType::kFloat32, 4, &amax));
  EXPECT_EQ(amax, 7.25f);
  ASSERT_TRUE(AbsMax(f.data(), DType::kFloat32, 0, &amax));
  EXPECT_EQ(amax, 0.0f);
}

}  // namespace
}  // namespace sdrt::internal
