// Block FP8 quantization (tensor/internal/fp8_scale.h) against PyTorch:
// tests/data/fp8_quant/expected.json, written by tests/golden/make_fp8_quant_golden.py with
// torch ops (a float32 scale per 128 x 128 tile or per tensor, float32 or e8m0 scales,
// float8_e4m3fn and e5m2 codes, the values dequantized back). Codes, scales and dequantized
// values must be PyTorch's bit for bit.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt {
namespace {

Tensor TensorOf(const nlohmann::json& j) {
  absl::StatusOr<Value> v = testing_golden::DecodeGoldenValue(j);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() && v->kind() == ValueKind::kTensor ? v->as_tensor() : Tensor();
}

// The first differing element of two tensors of one dtype and shape, or -1.
int64_t FirstDifference(const void* a, const Tensor& b) {
  const int64_t width = ElementBits(b.dtype()) / 8;
  for (int64_t i = 0; i < b.numel(); ++i) {
    if (std::memcmp(static_cast<const char*>(a) + i * width,
                    static_cast<const char*>(b.data_ptr()) + i * width,
                    static_cast<size_t>(width)) != 0) {
      return i;
    }
  }
  return -1;
}

TEST(Fp8ScaleGolden, TilesScalesCodesAndDequantizedValuesArePyTorchs) {
  absl::StatusOr<nlohmann::json> doc = testing_golden::ReadGoldenJson("fp8_quant/expected.json");
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_GE((*doc)["cases"].size(), 6u);
  for (const nlohmann::json& c : (*doc)["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const Tensor x = TensorOf(c["x"]), q = TensorOf(c["q"]), scales = TensorOf(c["scales"]);
    const Tensor dequantized = TensorOf(c["dequantized"]);
    ASSERT_EQ(x.dim(), 2);
    const int64_t rows = x.size(0), cols = x.size(1), tile = c["block"].get<int64_t>();
    std::vector<char> codes(static_cast<size_t>(q.nbytes()));
    std::vector<char> got_scales(static_cast<size_t>(scales.nbytes()));
    ASSERT_TRUE(internal::QuantizeMatrix(x.data_ptr(), x.dtype(), rows, cols, tile, codes.data(),
                                         q.dtype(), got_scales.data(), scales.dtype()));
    EXPECT_EQ(FirstDifference(got_scales.data(), scales), -1) << "scales";
    EXPECT_EQ(FirstDifference(codes.data(), q), -1) << "codes";
    std::vector<char> back(static_cast<size_t>(dequantized.nbytes()));
    ASSERT_TRUE(internal::DequantizeMatrix(q.data_ptr(), q.dtype(), scales.data_ptr(),
                                           scales.dtype(), rows, cols, tile, back.data(),
                                           dequantized.dtype()));
    EXPECT_EQ(FirstDifference(back.data(), dequantized), -1) << "dequantized";
  }
}

TEST(Fp8Scale, PowersOfTwoAndTileScales) {
  using internal::RoundUpToPowerOfTwo;
  EXPECT_EQ(RoundUpToPowerOfTwo(1.0f), 1.0f);
  EXPECT_EQ(RoundUpToPowerOfTwo(1.5f), 2.0f);
  EXPECT_EQ(RoundUpToPowerOfTwo(0.75f), 1.0f);
  EXPECT_EQ(RoundUpToPowerOfTwo(3.0e-3f), 1.0f / 256);
  // Subnormals: 3 x 2^-149 -> 2^-147; 2^-149 stays.
  EXPECT_EQ(RoundUpToPowerOfTwo(3 * 0x1p-149f), 0x1p-147f);
  EXPECT_EQ(RoundUpToPowerOfTwo(0x1p-149f), 0x1p-149f);
  EXPECT_EQ(internal::TileScale(0.0f, DType::kFloat8E4M3FN, false), 1.0f);
  EXPECT_EQ(internal::TileScale(448.0f, DType::kFloat8E4M3FN, false), 1.0f);
  EXPECT_EQ(internal::TileScale(57344.0f * 3, DType::kFloat8E5M2, true), 4.0f);
  // A dtype outside the recipe is refused.
  float amax = 0;
  const int32_t ints[2] = {1, 2};
  EXPECT_FALSE(internal::AbsMax(ints, DType::kInt32, 2, &amax));
  char out[2];
  EXPECT_FALSE(internal::QuantizeFloats(ints, DType::kInt32, out, DType::kFloat8E4M3FN, 1, 2));
  const float floats[2] = {-3.0f, 2.0f};
  EXPECT_FALSE(internal::QuantizeFloats(floats, DType::kFloat32, out, DType::kBFloat16, 1, 2));
  ASSERT_TRUE(internal::AbsMax(floats, DType::kFloat32, 2, &amax));
  EXPECT_EQ(amax, 3.0f);
}

}  // namespace
}  // namespace sdrt
