// ReduceInto (core/distributed/internal/reshard_reduce.h): how a destination combines
// Partial contributions, per dtype and op.
#include "sdrt/core/distributed/internal/reshard_reduce.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "sdrt/comm/internal/float16.h"

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

TEST(ReshardReduceTest, RefusesWhatItCannotCombine) {
  EXPECT_FALSE(CanReduce(DType::kFloat32, ReduceOp::kAvg));
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
