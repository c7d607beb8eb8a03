#include "sdrt/tensor/dtype.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

struct Row {
  DType dtype;
  const char* name;
  const char* safetensors;
  int64_t size;
};

// The table docs/PLAN.md gives, written out independently of the X-macro.
const Row kExpected[] = {
    {DType::kBool, "bool", "BOOL", 1},
    {DType::kUInt8, "uint8", "U8", 1},
    {DType::kInt8, "int8", "I8", 1},
    {DType::kInt16, "int16", "I16", 2},
    {DType::kInt32, "int32", "I32", 4},
    {DType::kInt64, "int64", "I64", 8},
    {DType::kFloat16, "float16", "F16", 2},
    {DType::kBFloat16, "bfloat16", "BF16", 2},
    {DType::kFloat32, "float32", "F32", 4},
    {DType::kFloat64, "float64", "F64", 8},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", "F8_E4M3", 1},
    {DType::kFloat8E5M2, "float8_e5m2", "F8_E5M2", 1},
};

TEST(DType, TableMatchesDesign) {
  ASSERT_EQ(std::size(kExpected), static_cast<size_t>(kNumDTypes));
  for (const Row& row : kExpected) {
    EXPECT_EQ(DTypeName(row.dtype), row.name);
    EXPECT_EQ(SafetensorsCode(row.dtype), row.safetensors);
    EXPECT_EQ(ElementSize(row.dtype), row.size);
    EXPECT_EQ(*DTypeFromName(row.name), row.dtype);
    EXPECT_EQ(*DTypeFromName(std::string("torch.") + row.name), row.dtype);
    EXPECT_EQ(*DTypeFromSafetensors(row.safetensors), row.dtype);
  }
}

TEST(DType, DLPackCodesRoundTripAndAreDistinct) {
  std::set<std::pair<int, int>> seen;
  for (const Row& row : kExpected) {
    const DLPackType t = ToDLPackType(row.dtype);
    EXPECT_EQ(t.bits, 8 * row.size);
    EXPECT_TRUE(seen.insert({t.code, t.bits}).second) << row.name;
    EXPECT_EQ(*DTypeFromDLPack(t.code, t.bits, 1), row.dtype);
  }
  EXPECT_EQ(ToDLPackType(DType::kBFloat16).code, 4);  // kDLBfloat
  EXPECT_EQ(ToDLPackType(DType::kBool).code, 6);      // kDLBool (DLPack >= 0.8)
  EXPECT_EQ(ToDLPackType(DType::kFloat8E4M3FN).code, 10);
  EXPECT_EQ(ToDLPackType(DType::kFloat8E5M2).code, 12);
}

TEST(DType, UnknownNamesAreErrorsNamingThem) {
  absl::StatusOr<DType> st = DTypeFromSafetensors("F8_E8M0");
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(), HasSubstr("F8_E8M0"));
  EXPECT_THAT(DTypeFromName("complex64").status().message(), HasSubstr("complex64"));
  EXPECT_THAT(DTypeFromDLPack(2, 32, 4).status().message(), HasSubstr("lanes=4"));
  absl::Status complex = DTypeFromDLPack(5, 64, 1).status();  // complex has no sdrt dtype
  EXPECT_EQ(complex.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(complex.message(), HasSubstr("DLPack dtype code=5 bits=64 has no sdrt dtype"));
}

}  // namespace
}  // namespace sdrt
