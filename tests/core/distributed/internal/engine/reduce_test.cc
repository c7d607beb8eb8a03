// ReduceInto and DivideBy (core/distributed/internal/engine/reduce.h): how a destination
// combines Partial contributions, per dtype and op, and finishes an average.
#include "sdrt/core/distributed/internal/engine/reduce.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/tensor/internal/float_cast.h"

namespace sdrt::internal {
namespace {

template <typename T>
Tensor Of(DType dtype, const std::vector<T>& values) {
  Tensor t = *Tensor::Empty({static_cast<int64_t>(values.size())}, dtype);
  std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  std::memcpy(out.data(), t.data_ptr(), out.size() * sizeof(T));
  return out;
}

TEST(ReshardReduceTest, IntegersWrapAndCompare) {
  const Tensor acc = Of<int8_t>(DType::kInt8, {127, -5, 3});
  ASSERT_TRUE(ReduceInto(acc, Of<int8_t>(DType::kInt8, {1, -7, 4}), ReduceOp::kSum).ok());
  EXPECT_EQ(Values<int8_t>(acc), (std::vector<int8_t>{-128, -12, 7}));
  const Tensor big = Of<int64_t>(DType::kInt64, {6, -2, 9});
  ASSERT_TRUE(ReduceInto(big, Of<int64_t>(DType::kInt64, {7, 5, -1}), ReduceOp::kProduct).ok());
  EXPECT_EQ(Values<int64_t>(big), (std::vector<int64_t>{42, -10, -9}));
  const Tensor low = Of<int32_t>(DType::kInt32, {4, -4});
  ASSERT_TRUE(ReduceInto(low, Of<int32_t>(DType::kInt32, {3, 2}), ReduceOp::kMin).ok());
  EXPECT_EQ(Values<int32_t>(low), (std::vector<int32_t>{3, -4}));
  const Tensor flags = Of<uint8_t>(DType::kBool, {0, 1, 0, 1});
  ASSERT_TRUE(ReduceInto(flags, Of<uint8_t>(DType::kBool, {0, 0, 1, 1}), ReduceOp::kSum).ok());
  EXPECT_EQ(Values<uint8_t>(flags), (std::vector<uint8_t>{0, 1, 1, 1}));
  ASSERT_TRUE(ReduceInto(flags, Of<uint8_t>(DType::kBool, {1, 0, 1, 0}), ReduceOp::kMin).ok());
  EXPECT_EQ(Values<uint8_t>(flags), (std::vector<uint8_t>{0, 0, 1, 0}));
}

TEST(ReshardReduceTest, HalvesCombineInFloat32) {
  const Tensor bf = Of<uint16_t>(DType::kBFloat16, {FloatToBFloat16(1.5f), FloatToBFloat16(-2)});
  ASSERT_TRUE(
      ReduceInto(bf, Of<uint16_t>(DType::kBFloat16, {FloatToBFloat16(2.25f), FloatToBFloat16(8)}),
                 ReduceOp::kMax)
          .ok());
  EXPECT_EQ(BFloat16ToFloat(Values<uint16_t>(bf)[0]), 2.25f);
  EXPECT_EQ(BFloat16ToFloat(Values<uint16_t>(bf)[1]), 8.0f);
  const Tensor h = Of<uint16_t>(DType::kFloat16, {FloatToFloat16(1.5f)});
  ASSERT_TRUE(
      ReduceInto(h, Of<uint16_t>(DType::kFloat16, {FloatToFloat16(2.25f)}), ReduceOp::kSum).ok());
  EXPECT_EQ(Float16ToFloat(Values<uint16_t>(h)[0]), 3.75f);
  const Tensor f = Of<double>(DType::kFloat64, {0.5});
  ASSERT_TRUE(ReduceInto(f, Of<double>(DType::kFloat64, {-4.0}), ReduceOp::kProduct).ok());
  EXPECT_EQ(Values<double>(f)[0], -2.0);
}

// avg sums; DivideBy then divides as PyTorch's avg does: 1/3 correctly rounded in each
// format (float32 0x3eaaaaab, float64 0x3fd5555555555555, bfloat16 0x3eab, float16 0x3555).
TEST(ReshardReduceTest, AvgSumsAndDividesInTheDtype) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    EXPECT_TRUE(CanReduce(dtype, ReduceOp::kAvg)) << DTypeName(dtype);
  }
  const Tensor f = Of<float>(DType::kFloat32, {1, -4, 0.5f});
  ASSERT_TRUE(ReduceInto(f, Of<float>(DType::kFloat32, {0, 2, 0.25f}), ReduceOp::kAvg).ok());
  EXPECT_EQ(Values<float>(f), (std::vector<float>{1, -2, 0.75f}));
  ASSERT_TRUE(DivideBy(f, 3).ok());
  uint32_t bits = 0;
  std::memcpy(&bits, f.data_ptr(), 4);
  EXPECT_EQ(bits, 0x3eaaaaabu);
  EXPECT_EQ(Values<float>(f)[1], -2.0f / 3.0f);
  EXPECT_EQ(Values<float>(f)[2], 0.25f);
  const Tensor d = Of<double>(DType::kFloat64, {1, 6});
  ASSERT_TRUE(DivideBy(d, 3).ok());
  uint64_t dbits = 0;
  std::memcpy(&dbits, d.data_ptr(), 8);
  EXPECT_EQ(dbits, 0x3fd5555555555555u);
  EXPECT_EQ(Values<double>(d)[1], 2.0);
  const Tensor bf = Of<uint16_t>(DType::kBFloat16, {FloatToBFloat16(1), FloatToBFloat16(-12)});
  ASSERT_TRUE(DivideBy(bf, 3).ok());
  EXPECT_EQ(Values<uint16_t>(bf), (std::vector<uint16_t>{0x3eab, FloatToBFloat16(-4)}));
  const Tensor h = Of<uint16_t>(DType::kFloat16, {FloatToFloat16(1), FloatToFloat16(7)});
  ASSERT_TRUE(DivideBy(h, 1).ok());
  EXPECT_EQ(Float16ToFloat(Values<uint16_t>(h)[1]), 7.0f);
  ASSERT_TRUE(DivideBy(h, 3).ok());
  EXPECT_EQ(Values<uint16_t>(h)[0], 0x3555);
  EXPECT_EQ(Values<uint16_t>(h)[1], FloatToFloat16(7.0f / 3.0f));
}

TEST(ReshardReduceTest, RefusesWhatItCannotCombine) {
  // PyTorch's avg divides in place, which it refuses for integers (and bool).
  EXPECT_FALSE(CanReduce(DType::kInt32, ReduceOp::kAvg));
  EXPECT_FALSE(CanReduce(DType::kInt64, ReduceOp::kAvg));
  EXPECT_FALSE(CanReduce(DType::kBool, ReduceOp::kAvg));
  EXPECT_FALSE(CanReduce(DType::kFloat8E4M3FN, ReduceOp::kAvg));
  EXPECT_EQ(DivideBy(Of<int32_t>(DType::kInt32, {6}), 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DivideBy(Of<float>(DType::kFloat32, {6}), 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      ReduceInto(Of<int32_t>(DType::kInt32, {6}), Of<int32_t>(DType::kInt32, {1}), ReduceOp::kAvg)
          .code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(CanReduce(DType::kFloat8E4M3FN, ReduceOp::kSum));
  EXPECT_FALSE(CanReduce(DType::kComplex64, ReduceOp::kSum));
  const Tensor a = Of<float>(DType::kFloat32, {1, 2});
  EXPECT_EQ(ReduceInto(a, Of<float>(DType::kFloat32, {1}), ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReduceInto(a, Of<int32_t>(DType::kInt32, {1, 2}), ReduceOp::kSum).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sdrt::internal
