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
  int bits;
  int dlpack_code;
};

// The table written out independently of the X-macro: the names PyTorch prints (ml_dtypes'
// for the 6-bit floats, which PyTorch lacks), the codes and widths of safetensors 0.8.0,
// the codes of DLPack 1.1's DLDataTypeCode.
const Row kExpected[] = {
    {DType::kBool, "bool", "BOOL", 8, 6},
    {DType::kUInt8, "uint8", "U8", 8, 1},
    {DType::kInt8, "int8", "I8", 8, 0},
    {DType::kInt16, "int16", "I16", 16, 0},
    {DType::kInt32, "int32", "I32", 32, 0},
    {DType::kInt64, "int64", "I64", 64, 0},
    {DType::kFloat16, "float16", "F16", 16, 2},
    {DType::kBFloat16, "bfloat16", "BF16", 16, 4},
    {DType::kFloat32, "float32", "F32", 32, 2},
    {DType::kFloat64, "float64", "F64", 64, 2},
    {DType::kFloat8E4M3FN, "float8_e4m3fn", "F8_E4M3", 8, 10},
    {DType::kFloat8E5M2, "float8_e5m2", "F8_E5M2", 8, 12},
    {DType::kUInt16, "uint16", "U16", 16, 1},
    {DType::kUInt32, "uint32", "U32", 32, 1},
    {DType::kUInt64, "uint64", "U64", 64, 1},
    {DType::kComplex64, "complex64", "C64", 64, 5},
    {DType::kFloat8E4M3FNUZ, "float8_e4m3fnuz", "F8_E4M3FNUZ", 8, 11},
    {DType::kFloat8E5M2FNUZ, "float8_e5m2fnuz", "F8_E5M2FNUZ", 8, 13},
    {DType::kFloat8E8M0FNU, "float8_e8m0fnu", "F8_E8M0", 8, 14},
    {DType::kFloat6E2M3FN, "float6_e2m3fn", "F6_E2M3", 6, 15},
    {DType::kFloat6E3M2FN, "float6_e3m2fn", "F6_E3M2", 6, 16},
    {DType::kFloat4E2M1FNx2, "float4_e2m1fn_x2", "F4", 4, 17},
};

TEST(DType, TableMatchesDesign) {
  ASSERT_EQ(std::size(kExpected), static_cast<size_t>(kNumDTypes));
  for (const Row& row : kExpected) {
    EXPECT_EQ(DTypeName(row.dtype), row.name);
    EXPECT_EQ(SafetensorsCode(row.dtype), row.safetensors);
    EXPECT_EQ(ElementBits(row.dtype), row.bits);
    EXPECT_EQ(IsSubByte(row.dtype), row.bits < 8) << row.name;
    EXPECT_EQ(ElementAlignment(row.dtype), row.bits < 8 ? 1 : row.bits / 8) << row.name;
    EXPECT_EQ(*DTypeFromName(row.name), row.dtype);
    EXPECT_EQ(*DTypeFromName(std::string("torch.") + row.name), row.dtype);
    EXPECT_EQ(*DTypeFromSafetensors(row.safetensors), row.dtype);
  }
}

TEST(DType, DLPackCodesFollowDLPack11AndRoundTrip) {
  std::set<std::pair<int, int>> seen;
  for (const Row& row : kExpected) {
    const DLPackType t = ToDLPackType(row.dtype);
    EXPECT_EQ(t.code, row.dlpack_code) << row.name;
    EXPECT_EQ(t.bits, row.bits) << row.name;
    EXPECT_TRUE(seen.insert({t.code, t.bits}).second) << row.name;
    EXPECT_EQ(*DTypeFromDLPack(t.code, t.bits, 1), row.dtype);
  }
}

TEST(DType, BytesForElementsIsCheckedAndWholeBytesOnly) {
  EXPECT_EQ(*BytesForElements(DType::kFloat32, 3), 12);
  EXPECT_EQ(*BytesForElements(DType::kComplex64, 3), 24);
  EXPECT_EQ(*BytesForElements(DType::kFloat4E2M1FNx2, 32), 16);
  EXPECT_EQ(*BytesForElements(DType::kFloat6E2M3FN, 4), 3);
  EXPECT_EQ(*BytesForElements(DType::kFloat4E2M1FNx2, 0), 0);
  absl::Status odd = BytesForElements(DType::kFloat4E2M1FNx2, 3).status();
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      odd.message(),
      "3 elements of float4_e2m1fn_x2 (4 bits each) are 12 bits, not a whole number of bytes");
  EXPECT_FALSE(BytesForElements(DType::kFloat6E3M2FN, 2).ok());
  EXPECT_FALSE(BytesForElements(DType::kFloat64, int64_t{1} << 61).ok());  // overflow
  EXPECT_FALSE(BytesForElements(DType::kUInt8, -1).ok());
  EXPECT_EQ(*ElementsForBytes(DType::kFloat4E2M1FNx2, 3), 6);
  EXPECT_EQ(*ElementsForBytes(DType::kFloat6E2M3FN, 6), 8);
  EXPECT_EQ(*ElementsForBytes(DType::kInt32, 8), 2);
  EXPECT_FALSE(ElementsForBytes(DType::kFloat6E2M3FN, 16).ok());  // 128 bits: 21.3 elements
  EXPECT_FALSE(ElementsForBytes(DType::kInt32, 6).ok());
}

TEST(DType, UnknownNamesAreErrorsNamingThem) {
  absl::StatusOr<DType> st = DTypeFromSafetensors("Q4_K");
  EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.status().message(), HasSubstr("Q4_K"));
  EXPECT_THAT(DTypeFromName("complex128").status().message(), HasSubstr("complex128"));
  EXPECT_THAT(DTypeFromDLPack(2, 32, 4).status().message(), HasSubstr("lanes=4"));
  absl::Status complex128 = DTypeFromDLPack(5, 128, 1).status();
  EXPECT_EQ(complex128.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(complex128.message(), HasSubstr("DLPack dtype code=5 bits=128 has no sdrt dtype"));
  // DLPack 1.1 leaves FP4 with bits != 4 unspecified: refused.
  EXPECT_FALSE(DTypeFromDLPack(17, 8, 1).ok());
}

}  // namespace
}  // namespace sdrt
