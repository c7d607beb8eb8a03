// Casts in the transfer engine (TransferTensor::destination_dtype): a destination of another
// float dtype than its source gets every element converted as tensor/internal/float_cast.h
// converts it (itself checked against PyTorch), the wire carrying the narrower dtype; run by
// the one-process simulator over layouts that make self copies, bucketed messages and
// strided locals. And what is refused: a dtype that is not cast, a Partial source.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tensor/internal/float_cast.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"

namespace sdrt::test {
namespace {

using ::testing::HasSubstr;
using internal::TransferPlan;
using internal::TransferTensor;

// Values a model holds and the edges of the narrow formats: long mantissas (each rounds),
// ties, and magnitudes past float8_e4m3fn's 448 and float16's 65504.
std::vector<double> Values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t x = 88172645463325252ull;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const double unit = static_cast<double>(x >> 11) / 9007199254740992.0;  // [0, 1)
    v[static_cast<size_t>(i)] = (unit - 0.5) * (i % 5 == 0 ? 2e5 : i % 5 == 1 ? 1e3 : 8.0);
  }
  v[0] = 464.0;  // a tie of float8_e4m3fn: 448
  v[1] = 1.0 + 1.0 / 256;  // a tie of bfloat16: 1.0
  return v;
}

// `full` converted element by element into `dtype`.
Tensor Converted(const Tensor& full, DType dtype) {
  Tensor out = *Tensor::Empty(full.shape(), dtype);
  EXPECT_TRUE(internal::ConvertFloats(full.data_ptr(), full.dtype(), out.data_ptr(), dtype,
                                      full.numel()));
  return out;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = *a.Contiguous(), cb = *b.Contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), static_cast<size_t>(ca.nbytes())) == 0;
}

struct CastCase {
  DType from, to;
};

class TransferCast : public ::testing::TestWithParam<CastCase> {};

TEST_P(TransferCast, EveryDestinationPieceIsTheConvertedSlice) {
  const CastCase c = GetParam();
  const IntVector shape = {7, 37};
  const Tensor full = FloatsOf(shape, c.from, Values(7 * 37));
  const Tensor expected_full = Converted(full, c.to);
  // Rows on three ranks -> columns on ranks 1 and 3: rank 1 copies to itself, the others
  // exchange; and boxes of a ShardedTensor on rank 0 alone.
  const std::vector<std::pair<internal::TransferLayout, internal::TransferLayout>> layouts = {
      {MeshLayout({3}, {0, 1, 2}, "[S(0)]"), MeshLayout({2}, {1, 3}, "[S(1)]")},
      {MeshLayout({2}, {0, 1}, "[S(1)]"),
       BoxLayout({{{0, 0}, {4, 37}, 0}, {{4, 0}, {3, 37}, 0}})},
  };
  for (const auto& [source, destination] : layouts) {
    TransferTensor tensor = Describe("w", c.from, shape, source, destination);
    tensor.destination_dtype = c.to;
    const absl::StatusOr<TransferPlan> plan = internal::PlanTransfer({tensor});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const internal::TransferTensorPlan& tp = plan->tensors[0];
    ASSERT_TRUE(tp.cast.has_value());
    EXPECT_EQ(tp.source_dtype(), c.from);
    EXPECT_EQ(tp.destination_dtype(), c.to);
    // The wire carries the narrower dtype: the bytes of the same plan in it.
    const DType wire = ElementBits(c.to) < ElementBits(c.from) ? c.to : c.from;
    EXPECT_EQ(tp.dtype, wire);
    const absl::StatusOr<TransferPlan> same =
        internal::PlanTransfer({Describe("w", wire, shape, source, destination)});
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(plan->stats.wire_bytes, same->stats.wire_bytes);
    EXPECT_GT(plan->stats.wire_bytes, 0);

    TransferTensor in_from = tensor;
    in_from.destination_dtype.reset();
    const absl::StatusOr<RankLocals> sources = PieceLocals(full, in_from, /*source=*/true);
    ASSERT_TRUE(sources.ok()) << sources.status();
    TransferTensor in_to = Describe("w", c.to, shape, source, destination);
    const absl::StatusOr<RankLocals> expected =
        PieceLocals(expected_full, in_to, /*source=*/false);
    ASSERT_TRUE(expected.ok());
    for (const LocalLayout layout : {LocalLayout::kContiguous, LocalLayout::kTransposed}) {
      RankLocals laid_out;
      for (const auto& [rank, locals] : *sources) {
        for (const Tensor& local : locals) laid_out[rank].push_back(*Relayout(local, layout));
      }
      std::vector<RankLocals> destinations;
      ASSERT_TRUE(SimulateReshard(*plan, {laid_out}, destinations).ok());
      for (const auto& [rank, locals] : *expected) {
        ASSERT_EQ(destinations[0][rank].size(), locals.size()) << "rank " << rank;
        for (size_t k = 0; k < locals.size(); ++k) {
          EXPECT_TRUE(SameBytes(destinations[0][rank][k], locals[k]))
              << DTypeName(c.from) << " -> " << DTypeName(c.to) << ", rank " << rank
              << " local " << k << ": " << destinations[0][rank][k].ToString();
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Pairs, TransferCast,
    ::testing::Values(CastCase{DType::kFloat32, DType::kBFloat16},
                      CastCase{DType::kBFloat16, DType::kFloat32},
                      CastCase{DType::kFloat32, DType::kFloat16},
                      CastCase{DType::kFloat16, DType::kBFloat16},
                      CastCase{DType::kFloat32, DType::kFloat8E4M3FN},
                      CastCase{DType::kBFloat16, DType::kFloat8E5M2},
                      CastCase{DType::kFloat8E4M3FN, DType::kBFloat16},
                      CastCase{DType::kFloat64, DType::kBFloat16},
                      CastCase{DType::kFloat32, DType::kFloat64},
                      CastCase{DType::kFloat64, DType::kFloat8E4M3FN}),
    [](const ::testing::TestParamInfo<CastCase>& info) {
      return absl::StrCat(DTypeName(info.param.from), "To", DTypeName(info.param.to));
    });

TEST(TransferCastRefused, OnlyFloatsAreCastAndNoPartialSource) {
  TransferTensor tensor = Describe("ids", DType::kInt32, {4, 4}, MeshLayout({2}, {}, "[S(0)]"),
                                   MeshLayout({2}, {}, "[S(1)]"));
  tensor.destination_dtype = DType::kFloat32;
  absl::StatusOr<TransferPlan> plan = internal::PlanTransfer({tensor});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("no cast from int32 to float32"));

  // A Partial source, whatever the destination dtype and even on a mesh of one rank.
  for (const DType to : {DType::kBFloat16, DType::kFloat8E4M3FN}) {
    for (const int64_t ranks : {2, 1}) {
      TransferTensor partial = Describe("p", DType::kFloat32, {4, 4},
                                        MeshLayout({ranks}, {}, "[P(sum)]"),
                                        MeshLayout({ranks}, {}, "[S(0)]"));
      partial.destination_dtype = to;
      plan = internal::PlanTransfer({partial});
      ASSERT_FALSE(plan.ok());
      EXPECT_THAT(plan.status().message(), HasSubstr("a Partial source is not cast"));
    }
  }
}

// Leaf layouts of two ranks: a float destination of another float dtype is a cast; an
// integer one is still the error it was.
TEST(TransferCastRefused, MergedLayoutsCastFloatsOnly) {
  const auto leaf = [](bool source, DType dtype) {
    internal::LeafLayout l;
    l.path = "w";
    l.source = source;
    l.dtype = dtype;
    l.shape = {4, 4};
    l.kind = internal::LeafLayout::Kind::kMesh;
    l.mesh_shape = {1};
    l.mesh_ranks = {0};
    l.placements = {Placement::Replicate()};
    return l;
  };
  absl::StatusOr<std::vector<TransferTensor>> merged = internal::MergeLeafLayouts(
      {{leaf(true, DType::kFloat32), leaf(false, DType::kBFloat16)}}, nullptr);
  ASSERT_TRUE(merged.ok()) << merged.status();
  ASSERT_EQ(merged->size(), 1u);
  EXPECT_EQ((*merged)[0].dtype, DType::kFloat32);
  EXPECT_EQ((*merged)[0].destination_dtype, DType::kBFloat16);
  merged = internal::MergeLeafLayouts(
      {{leaf(true, DType::kFloat32), leaf(false, DType::kInt32)}}, nullptr);
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(merged.status().message(),
              HasSubstr("the source is float32[4, 4] but the destination int32[4, 4]"));
}

}  // namespace
}  // namespace sdrt::test
