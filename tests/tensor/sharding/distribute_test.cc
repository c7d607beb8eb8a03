// The Partial identity rule and fill (tensor/sharding/distribute.h) on the CPU; the CUDA
// fill is in tests/core/distributed/dtensor_ops_gpu_test.cc.
#include "sdrt/tensor/sharding/distribute.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;

PartialIdentity Of(IntVector mesh_shape, const char* placements, IntVector coordinate) {
  absl::StatusOr<PartialIdentity> fill =
      PartialIdentityOf(*DeviceMesh::Create(mesh_shape), *ParsePlacements(placements), coordinate);
  EXPECT_TRUE(fill.ok()) << fill.status();
  return fill.ok() ? *fill : PartialIdentity::kNone;
}

TEST(PartialFill, RuleOfDistributeTensor) {
  EXPECT_EQ(Of({4}, "[P(sum)]", {0}), PartialIdentity::kNone);
  EXPECT_EQ(Of({4}, "[P(sum)]", {3}), PartialIdentity::kZero);
  EXPECT_EQ(Of({4}, "[P(product)]", {1}), PartialIdentity::kOne);
  for (const char* keep : {"[P(avg)]", "[P(min)]", "[P(max)]", "[R]", "[S(0)]"}) {
    EXPECT_EQ(Of({4}, keep, {2}), PartialIdentity::kNone) << keep;
  }
  // Sum wins over product; coordinate 0 of a Partial dim keeps the value.
  EXPECT_EQ(Of({2, 2}, "[P(sum), P(product)]", {1, 1}), PartialIdentity::kZero);
  EXPECT_EQ(Of({2, 2}, "[P(sum), P(product)]", {0, 1}), PartialIdentity::kOne);
  EXPECT_EQ(Of({2, 2}, "[P(sum), P(product)]", {1, 0}), PartialIdentity::kZero);
  EXPECT_EQ(Of({2, 2}, "[P(sum), P(product)]", {0, 0}), PartialIdentity::kNone);
  EXPECT_EQ(Of({2, 2}, "[S(0), P(sum)]", {1, 0}), PartialIdentity::kNone);
}

TEST(PartialFill, RuleErrors) {
  const DeviceMesh mesh = *DeviceMesh::Create({2, 3});
  const std::vector<Placement> two = *ParsePlacements("[P(sum), R]");
  const int64_t inside[] = {1, 2};
  const int64_t outside[] = {1, 3};
  const int64_t negative[] = {-1, 0};
  const int64_t short_coordinate[] = {1};
  EXPECT_TRUE(PartialIdentityOf(mesh, two, inside).ok());
  for (IntSpan bad : {IntSpan(outside), IntSpan(negative)}) {
    const absl::Status s = PartialIdentityOf(mesh, two, bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("is outside"));
  }
  EXPECT_EQ(PartialIdentityOf(mesh, two, short_coordinate).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartialIdentityOf(mesh, *ParsePlacements("[P(sum)]"), inside).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The fill reports the same errors before writing anything.
  Tensor t = *Tensor::Zeros({3}, DType::kInt32);
  EXPECT_EQ(FillPartialIdentity(t, mesh, two, outside).code(), absl::StatusCode::kInvalidArgument);
  Tensor undefined;
  EXPECT_EQ(FillPartialIdentity(undefined, mesh, two, inside).code(),
            absl::StatusCode::kFailedPrecondition);
}

// The bytes of the value one, little-endian.
std::vector<uint8_t> OneBytes(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return {0x00, 0x3c};
    case DType::kBFloat16:
      return {0x80, 0x3f};
    case DType::kFloat32:
      return {0x00, 0x00, 0x80, 0x3f};
    case DType::kFloat64:
      return {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    case DType::kFloat8E4M3FN:
      return {0x38};
    case DType::kFloat8E5M2:
      return {0x3c};
    default: {
      std::vector<uint8_t> bytes(static_cast<size_t>(ElementSize(dtype)), 0);
      bytes[0] = 1;
      return bytes;
    }
  }
}

constexpr DType kAllDTypes[] = {
#define SDRT_DTYPE_LIST(e, name, st, size, dl_code, dl_bits) DType::k##e,
    SDRT_DTYPE_TABLE(SDRT_DTYPE_LIST)
#undef SDRT_DTYPE_LIST
};

TEST(PartialFill, FillsZerosAndOnesOfEveryDType) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const int64_t off_zero[] = {1};
  for (DType dtype : kAllDTypes) {
    for (const char* placements : {"[P(sum)]", "[P(product)]", "[P(max)]"}) {
      Tensor t = *Tensor::Empty({2, 3}, dtype);
      std::memset(t.data_ptr(), 0x5a, static_cast<size_t>(t.nbytes()));
      ASSERT_TRUE(FillPartialIdentity(t, mesh, *ParsePlacements(placements), off_zero).ok());
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      const int64_t elem = t.element_size();
      for (int64_t i = 0; i < t.numel(); ++i) {
        const std::vector<uint8_t> got(bytes + i * elem, bytes + (i + 1) * elem);
        if (std::string(placements) == "[P(sum)]") {
          EXPECT_EQ(got, std::vector<uint8_t>(static_cast<size_t>(elem), 0)) << DTypeName(dtype);
        } else if (std::string(placements) == "[P(product)]") {
          EXPECT_EQ(got, OneBytes(dtype)) << DTypeName(dtype);
        } else {
          EXPECT_EQ(got, std::vector<uint8_t>(static_cast<size_t>(elem), 0x5a)) << DTypeName(dtype);
        }
      }
    }
  }
}

TEST(PartialFill, FillsOnlyTheElementsOfAStridedView) {
  const DeviceMesh mesh = *DeviceMesh::Create({3});
  const int64_t coordinate[] = {2};
  Tensor base = *Tensor::Empty({4, 5}, DType::kInt32);
  for (int64_t i = 0; i < 20; ++i) base.data<int32_t>()[i] = 7;
  Tensor view = *base.Slice(1, 1, 5, 2);  // columns 1 and 3
  ASSERT_TRUE(FillPartialIdentity(view, mesh, *ParsePlacements("[P(product)]"), coordinate).ok());
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 5; ++c) {
      EXPECT_EQ(base.data<int32_t>()[r * 5 + c], c == 1 || c == 3 ? 1 : 7) << r << "," << c;
    }
  }
  // Empty and meta tensors are left alone.
  Tensor empty = *Tensor::Empty({0, 3}, DType::kFloat32);
  EXPECT_TRUE(FillPartialIdentity(empty, mesh, *ParsePlacements("[P(sum)]"), coordinate).ok());
  Tensor meta = *Tensor::Meta({2, 3}, DType::kFloat32);
  EXPECT_TRUE(FillPartialIdentity(meta, mesh, *ParsePlacements("[P(sum)]"), coordinate).ok());
}

}  // namespace
}  // namespace sdrt
