// DistributeTensor and the Partial identity rule and fill (tensor/sharding/distribute.h) on
// the CPU, no communicator needed; the CUDA paths are in
// tests/core/distributed/dtensor_ops_gpu_test.cc.
#include "sdrt/tensor/sharding/distribute.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/test_util.h"

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
  absl::Status s = PartialIdentityOf(mesh, two, short_coordinate).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("coordinate [1] 1 entries"));
  s = PartialIdentityOf(mesh, *ParsePlacements("[P(sum)]"), inside).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("has 1 placements and coordinate [1, 2] 2 entries"));
  // The fill reports the same errors before writing anything.
  Tensor t = *Tensor::Zeros({3}, DType::kInt32);
  s = FillPartialIdentity(t, mesh, two, outside);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is outside"));
  EXPECT_THAT(std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + 3),
              ::testing::ElementsAre(0, 0, 0));
  Tensor undefined;
  s = FillPartialIdentity(undefined, mesh, two, inside);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("FillPartialIdentity: undefined tensor"));
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
    case DType::kFloat8E4M3FNUZ:
    case DType::kFloat8E5M2FNUZ:
      return {0x40};
    case DType::kFloat8E8M0FNU:
      return {0x7f};
    case DType::kComplex64:
      return {0x00, 0x00, 0x80, 0x3f, 0, 0, 0, 0};
    default: {
      std::vector<uint8_t> bytes(static_cast<size_t>(ElementBits(dtype) / 8), 0);
      bytes[0] = 1;
      return bytes;
    }
  }
}

TEST(PartialFill, FillsZerosAndOnesOfEveryDType) {
  const DeviceMesh mesh = *DeviceMesh::Create({2});
  const int64_t off_zero[] = {1};
  for (DType dtype : test::kAllDTypes) {
    for (const char* placements : {"[P(sum)]", "[P(product)]", "[P(max)]"}) {
      Tensor t = *Tensor::Empty({2, 4}, dtype);
      std::memset(t.data_ptr(), 0x5a, static_cast<size_t>(t.nbytes()));
      const absl::Status filled =
          FillPartialIdentity(t, mesh, *ParsePlacements(placements), off_zero);
      const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
      if (IsSubByte(dtype)) {  // zeros as bytes; ones are refused
        const uint8_t want = std::string(placements) == "[P(sum)]" ? 0 : 0x5a;
        EXPECT_EQ(filled.ok(), std::string(placements) != "[P(product)]") << filled;
        EXPECT_EQ(std::vector<uint8_t>(bytes, bytes + t.nbytes()),
                  std::vector<uint8_t>(static_cast<size_t>(t.nbytes()), want));
        continue;
      }
      ASSERT_TRUE(filled.ok()) << filled;
      const int64_t elem = ElementBits(dtype) / 8;
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

std::shared_ptr<const DeviceMesh> Mesh(IntSpan shape) {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape));
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// A meta full tensor gives a meta local of the local shape, for every rank; an undefined
// tensor and a rank outside the mesh are errors.
TEST(DistributeTensor, MetaTensorsGiveMetaLocalsOfTheLocalShape) {
  auto mesh = Mesh({4});
  const Tensor meta = *Tensor::Meta({10, 3}, DType::kBFloat16);
  for (int64_t rank = 0; rank < 4; ++rank) {
    for (const char* placements : {"[S(0)]", "[_S(0, 2)]", "[P(sum)]"}) {
      absl::StatusOr<DTensor> dt = DistributeTensor(meta, mesh, *ParsePlacements(placements), rank);
      ASSERT_TRUE(dt.ok()) << dt.status();
      EXPECT_TRUE(dt->local().is_meta());
      EXPECT_EQ(dt->local().shape(),
                *ComputeLocalShape(meta.shape(), *mesh, *ParsePlacements(placements), rank));
    }
  }
  absl::Status s = DistributeTensor(Tensor(), mesh, {Placement::Shard(0)}, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("DistributeTensor: undefined tensor"));
  s = DistributeTensor(meta, mesh, {Placement::Shard(0)}, 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("DistributeTensor: rank 4 is not in DeviceMesh(cpu, 4"));
}

// The Partial fill of DistributeTensor on a strided source.
TEST(DistributeTensor, FillsPartialsOffCoordinateZero) {
  auto mesh = Mesh({2, 2});
  const Tensor base = test::Arange({3, 8}, DType::kFloat32, 1);
  const Tensor strided = *base.Slice(1, 0, 8, 2);  // 3x4
  const std::vector<Placement> p = {Placement::Partial(ReduceOp::kSum),
                                    Placement::Partial(ReduceOp::kProduct)};
  const std::vector<std::vector<float>> want = {
      Values(*strided.Contiguous()), std::vector<float>(12, 1.0f), std::vector<float>(12, 0.0f),
      std::vector<float>(12, 0.0f)};
  for (int64_t rank = 0; rank < 4; ++rank) {
    absl::StatusOr<DTensor> dt = DistributeTensor(strided, mesh, p, rank);
    ASSERT_TRUE(dt.ok()) << dt.status();
    EXPECT_EQ(Values(dt->local()), want[rank]) << "rank " << rank;
  }
}

}  // namespace
}  // namespace sdrt
