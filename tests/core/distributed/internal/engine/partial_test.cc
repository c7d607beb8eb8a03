// PlanTransfer of Partial sources (core/distributed/internal/engine/plan.h), run by the
// one-process simulator: every contribution reaches every destination piece once, in plan
// order, and is reduced there with the source's op (reduce.h); Partial(avg) is
// the mean, divided once after the last contribution as PyTorch's avg divides.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::TransferPlan;
using internal::TransferTensor;

// Simulates `plan` (of `tensor` alone) from sources where contribution c holds parts[c],
// split by the source's non-Partial placements and laid out transposed, and expects every
// destination piece to hold its piece of `full` bit for bit, with the bytes at the optimum.
void ExpectReducedTo(const TransferPlan& plan, const TransferTensor& tensor,
                     const std::vector<Tensor>& parts, const Tensor& full) {
  std::vector<Placement> replicated = tensor.source.placements;
  for (Placement& p : replicated) {
    if (p.is_partial()) p = Placement::Replicate();
  }
  std::vector<RankLocals> sources(1), destinations;
  for (const internal::TransferPiece& piece : plan.tensors[0].source()) {
    const DTensor local =
        *DistributeTensor(parts[piece.contribution], tensor.source.mesh, replicated, piece.rank);
    sources[0][piece.rank].push_back(*Relayout(local.local(), LocalLayout::kTransposed));
  }
  ASSERT_TRUE(SimulateReshard(plan, sources, destinations).ok());
  for (int64_t rank : tensor.destination.mesh->ranks()) {
    const DTensor expected =
        *DistributeTensor(full, tensor.destination.mesh, tensor.destination.placements, rank);
    const Tensor got = *destinations[0][rank][0].Contiguous();
    ASSERT_EQ(got.nbytes(), expected.local().nbytes());
    EXPECT_EQ(std::memcmp(got.data_ptr(), expected.local().data_ptr(), got.nbytes()), 0)
        << "rank " << rank;
  }
  EXPECT_EQ(plan.stats.wire_bytes + plan.stats.self_bytes,
            plan.tensors[0].contributions() * full.nbytes());  // each contribution once
  EXPECT_EQ(plan.stats.wire_bytes, plan.stats.optimum_bytes);
  EXPECT_EQ(plan.stats.optimum_bytes, BruteForceOptimumBytes(plan.tensors[0]));
}

// Partial sources: every contribution reaches every destination piece (DistributeTensor's
// Partial fill makes the reduction give back the full tensor; FiniteBytes has no -0 or NaN
// for a sum with zeros to change) and the bytes of each count.
TEST(ReshardPartialTest, PartialSourcesAreReducedOnTheDestination) {
  struct Case {
    DType dtype;
    IntVector mesh;
    std::vector<int64_t> ranks;
    const char* placements;
    int64_t contributions;
  };
  for (const Case& c : std::vector<Case>{
           {DType::kFloat32, {2, 2}, {0, 1, 2, 3}, "[S(0), P(sum)]", 2},
           {DType::kBFloat16, {2, 2}, {0, 1, 2, 3}, "[P(sum), P(sum)]", 4},
           {DType::kFloat16, {2, 2}, {3, 2, 1, 0}, "[R, P(max)]", 2},
           {DType::kInt32, {3}, {0, 4, 5}, "[P(min)]", 3},
           {DType::kBFloat16, {2, 2}, {0, 1, 2, 3}, "[P(product), _S(1, 2)]", 2},
           {DType::kBool, {2}, {4, 5}, "[P(sum)]", 2},
       }) {
    const TransferTensor tensor =
        Describe("grad", c.dtype, {9, 6}, MeshLayout(c.mesh, c.ranks, c.placements),
                 MeshLayout({3}, {0, 4, 6}, "[S(1)]"));
    absl::StatusOr<TransferPlan> plan =
        ReshardAndCheck({tensor}, {FiniteBytes(tensor.shape, tensor.dtype, 3)});
    ASSERT_TRUE(plan.ok()) << c.placements << ": " << plan.status();
    EXPECT_EQ(plan->tensors[0].contributions(), c.contributions) << c.placements;
    // Contribution 0 comes first for every tensor.
    const std::vector<internal::TransferMessage>& messages = plan->tensors[0].messages();
    for (size_t i = 1; i < messages.size(); ++i) {
      EXPECT_LE(messages[i - 1].contribution, messages[i].contribution);
    }
  }
}

// Two layouts with one Partial source side: the side is made once and both layouts take
// its contributions and op from it.
TEST(ReshardPartialTest, APartialSourceSideSharedByTwoLayouts) {
  const TransferTensor a =
      Describe("a", DType::kFloat32, {9, 6}, MeshLayout({2, 2}, {0, 1, 2, 3}, "[S(0), P(max)]"),
               MeshLayout({3}, {0, 4, 6}, "[S(1)]"));
  const TransferTensor b =
      Describe("b", DType::kFloat32, {9, 6}, MeshLayout({2, 2}, {0, 1, 2, 3}, "[S(0), P(max)]"),
               MeshLayout({2}, {5, 1}, "[S(0)]"));
  absl::StatusOr<TransferPlan> plan =
      ReshardAndCheck({a, b}, {FiniteBytes(a.shape, a.dtype, 3), FiniteBytes(b.shape, b.dtype, 4)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(&plan->tensors[0].source(), &plan->tensors[1].source());
  for (const internal::TransferTensorPlan& t : plan->tensors) {
    EXPECT_EQ(t.contributions(), 2) << t.name;
    EXPECT_EQ(t.reduce_op(), ReduceOp::kMax) << t.name;
  }
}

// Partial(sum) contributions that are not the identity fill: contribution c of an int32
// tensor is random for c > 0 and full minus their (wrapping) sum for c = 0, so only a
// destination that adds every contribution exactly once gets `full` back.
TEST(ReshardPartialTest, PartialSumOfRandomContributions) {
  for (const char* placements : {"[P(sum)]", "[S(0), P(sum)]", "[P(sum), R, _S(1, 2)]"}) {
    SCOPED_TRACE(placements);
    const std::vector<Placement> parsed = *ParsePlacements(placements);
    const IntVector mesh_shape = parsed.size() == 1   ? IntVector{3}
                                 : parsed.size() == 2 ? IntVector{2, 2}
                                                      : IntVector{2, 2, 2};
    const TransferTensor tensor =
        Describe("grad", DType::kInt32, {8, 6}, MeshLayout(mesh_shape, {}, placements),
                 MeshLayout({3}, {0, 3, 9}, "[S(1)]"));
    const TransferPlan plan = *internal::PlanTransfer({tensor});
    const Tensor full = HashBytes(tensor.shape, DType::kInt32, 1);
    std::vector<Tensor> parts = {*full.Clone()};
    for (int64_t c = 1; c < plan.tensors[0].contributions(); ++c) {
      parts.push_back(HashBytes(tensor.shape, DType::kInt32, 10 + static_cast<uint64_t>(c)));
      for (int64_t i = 0; i < full.numel(); ++i) {
        uint32_t* first = parts[0].data<uint32_t>();
        first[i] -= parts.back().data<uint32_t>()[i];
      }
    }
    ExpectReducedTo(plan, tensor, parts, full);
  }
}

// Partial(avg) of distinct contributions: contribution c holds the small integers
// (7 i + 5 c + 3) mod 23 - 11, whose sums are exact in every format, and every destination
// piece must hold the mean: the sum divided by C, correctly rounded to the dtype, as
// PyTorch's avg gives it (C = 3 and 8 make means that round, C = 1 divides nothing).
TEST(ReshardPartialTest, PartialAvgIsTheMeanOfTheContributions) {
  struct Case {
    DType dtype;
    IntVector mesh;
    const char* placements;
    int64_t contributions;
  };
  for (const Case& c : std::vector<Case>{
           {DType::kFloat32, {3}, "[P(avg)]", 3},
           {DType::kFloat32, {2, 2}, "[P(avg), S(0)]", 2},
           {DType::kBFloat16, {2, 2}, "[P(avg), S(0)]", 2},
           {DType::kBFloat16, {8}, "[P(avg)]", 8},
           {DType::kFloat16, {2, 2}, "[P(avg), P(avg)]", 4},
           {DType::kFloat16, {2, 3}, "[S(1), P(avg)]", 3},
           {DType::kFloat64, {2, 2, 2}, "[P(avg), R, _S(1, 2)]", 2},
           {DType::kFloat64, {3, 2}, "[P(avg), P(avg)]", 6},
           {DType::kBFloat16, {1, 3}, "[P(avg), S(0)]", 1},
       }) {
    SCOPED_TRACE(absl::StrCat(DTypeName(c.dtype), " ", c.placements));
    const TransferTensor tensor =
        Describe("grad", c.dtype, {8, 6}, MeshLayout(c.mesh, {}, c.placements),
                 MeshLayout({3}, {0, 3, 9}, "[S(1)]"));
    const TransferPlan plan = *internal::PlanTransfer({tensor});
    ASSERT_EQ(plan.tensors[0].contributions(), c.contributions);
    std::vector<Tensor> parts;
    std::vector<double> mean(48, 0.0);
    for (int64_t k = 0; k < c.contributions; ++k) {
      std::vector<double> v(mean.size());
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = static_cast<double>((static_cast<int64_t>(i) * 7 + k * 5 + 3) % 23 - 11);
        mean[i] += v[i];
      }
      parts.push_back(FloatsOf(tensor.shape, c.dtype, v));
    }
    for (double& x : mean) x /= static_cast<double>(c.contributions);
    ExpectReducedTo(plan, tensor, parts, FloatsOf(tensor.shape, c.dtype, mean));
  }
}

// The sum is the dtype's, in plan order (contribution 0 first), rounded after each step as
// a Partial(sum) is, then divided once: bfloat16 1 + 1/256 rounds to 1 (a tie, to even),
// and so does + 1/256 again, so element 0 is bfloat16(1/3), not the exact mean 0.3359375.
// (PyTorch sums in the order of its collective; the golden cases keep their sums exact.)
TEST(ReshardPartialTest, PartialAvgDividesTheDtypesSum) {
  const TransferTensor tensor = Describe(
      "grad", DType::kBFloat16, {4}, MeshLayout({3}, {}, "[P(avg)]"), MeshLayout({1}, {5}, "[R]"));
  const TransferPlan plan = *internal::PlanTransfer({tensor});
  const std::vector<Tensor> parts = {FloatsOf({4}, DType::kBFloat16, {1, 3, -6, 0.5}),
                                     FloatsOf({4}, DType::kBFloat16, {1.0 / 256, 1, 1, 0.25}),
                                     FloatsOf({4}, DType::kBFloat16, {1.0 / 256, 2, 1, 0.25})};
  ExpectReducedTo(plan, tensor, parts,
                  FloatsOf({4}, DType::kBFloat16, {1.0 / 3, 2, -4.0 / 3, 1.0 / 3}));
}

// Integers and bool: PyTorch refuses avg (its in-place division of a sum), so does the
// planner, naming the tensor.
TEST(ReshardPartialTest, PartialAvgOfIntegersIsRefused) {
  for (DType dtype : {DType::kInt32, DType::kInt64, DType::kUInt8, DType::kBool}) {
    const absl::Status status =
        internal::PlanTransfer({Describe("steps", dtype, {4}, MeshLayout({2}, {}, "[P(avg)]"),
                                        MeshLayout({2}, {}, "[R]"))})
            .status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << DTypeName(dtype);
    EXPECT_NE(std::string(status.message()).find("'steps'"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace sdrt::test
