// Seeded fuzz of PlanTransfer and its packing (issue 14's proof): random shapes (rank 0-4,
// uneven and empty pieces), dtypes (sub-byte ones too), source and destination layouts
// (meshes of 1-3 axes over random subsets of a world of 1-8 ranks with Shard, Replicate
// and _StridedShard, Partial on the source where the dtype reduces (avg: the floats), or
// ShardedTensor boxes) and source locals laid out contiguous, transposed or narrowed
// (case-050), each simulated in one process and checked bit-exact against DistributeTensor
// with wire bytes equal to the optimum (ReshardAndCheck).
//
// SDRT_RESHARD_FUZZ_CASES (default 10000) and SDRT_RESHARD_FUZZ_SEED (default 1) choose
// the run: e.g. SDRT_RESHARD_FUZZ_CASES=1000000 for a long one.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/reduce.h"
#include "sdrt/tests/core/distributed/internal/engine/random.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::TransferLayout;
using internal::TransferTensor;

int64_t EnvOr(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::strtoll(value, nullptr, 10) : fallback;
}

constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16,       DType::kUInt8,
                             DType::kInt64,   DType::kComplex64,      DType::kFloat8E4M3FN,
                             DType::kBool,    DType::kFloat4E2M1FNx2, DType::kFloat6E2M3FN};

TEST(ReshardFuzzTest, RandomLayoutsAreBitExactAtTheOptimum) {
  const int64_t cases = EnvOr("SDRT_RESHARD_FUZZ_CASES", 10000);
  const int64_t seed = EnvOr("SDRT_RESHARD_FUZZ_SEED", 1);
  int64_t failures = 0, refused = 0, wire = 0, messages = 0, nonempty = 0, reduced = 0,
          averaged = 0, fanned = 0;
  for (int64_t c = 0; c < cases && failures < 5; ++c) {
    Random rng(static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(c));
    const DType dtype = kDTypes[rng.Uniform(0, std::size(kDTypes) - 1)];
    const int ndim = static_cast<int>(rng.Uniform(IsSubByte(dtype) ? 1 : 0, 4));
    IntVector shape;
    for (int d = 0; d < ndim; ++d) shape.push_back(rng.Chance(5) ? 0 : rng.Uniform(1, 6));
    if (IsSubByte(dtype)) shape.back() = 4 * rng.Uniform(1, 2);  // whole bytes in all
    const int64_t world = rng.Uniform(1, 8);
    // Partial sources where the dtype reduces (half of those cases; avg: the floats).
    constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                                 ReduceOp::kAvg};
    const ReduceOp op = kOps[rng.Uniform(0, std::size(kOps) - 1)];
    const bool partial = internal::CanReduce(dtype, op) && rng.Chance(50);
    auto layout = [&](bool source) {
      return rng.Chance(15) ? RandomBoxes(rng, world, shape)
                            : RandomMesh(rng, world, ndim, 0, source && partial ? &op : nullptr);
    };
    TransferTensor tensor{absl::StrCat("case", c), dtype, shape, layout(true), layout(false)};
    const LocalLayout local =
        IsSubByte(dtype) ? LocalLayout::kContiguous : static_cast<LocalLayout>(rng.Uniform(0, 2));
    // A third of the cases place the ranks on up to 3 nodes: fan-out, internode bytes.
    std::vector<int64_t> nodes;
    if (rng.Chance(33)) {
      for (int64_t r = 0; r < world; ++r) nodes.push_back(rng.Uniform(0, 2));
    }
    absl::StatusOr<internal::TransferPlan> plan =
        ReshardAndCheck({tensor},
                        // FiniteBytes: no -0 or NaN for a reduction with the identity to
                        // change; avg: every contribution holds the value, small integers
                        // whose sum is exact, so that the mean is the value again.
                        {!partial               ? HashBytes(shape, dtype, static_cast<uint64_t>(c))
                         : op == ReduceOp::kAvg ? SmallIntegers(shape, dtype, c)
                                                : FiniteBytes(shape, dtype, c)},
                        local, nodes);
    if (!plan.ok() && IsSubByte(dtype) &&
        plan.status().code() == absl::StatusCode::kInvalidArgument &&
        absl::StrContains(plan.status().message(), "byte")) {
      ++refused;  // a layout that cuts a sub-byte element: refused by rule
      continue;
    }
    if (plan.ok()) {
      wire += plan->stats.wire_bytes;
      messages += plan->stats.messages;
      nonempty += plan->stats.wire_bytes + plan->stats.self_bytes > 0 ? 1 : 0;
      reduced += plan->tensors[0].contributions() > 1 ? 1 : 0;
      for (const internal::TransferMessage& m : plan->tensors[0].messages()) {
        if (m.forward) {
          ++fanned;
          break;
        }
      }
      averaged += plan->tensors[0].contributions() > 1 && op == ReduceOp::kAvg ? 1 : 0;
    }
    if (!plan.ok()) {
      ++failures;
      ADD_FAILURE() << "case " << c << " seed " << seed << ": " << DTypeName(dtype)
                    << ShapeToString(shape) << " from " << LayoutString(tensor.source) << " to "
                    << LayoutString(tensor.destination) << " (local layout "
                    << static_cast<int>(local) << "): " << plan.status();
    }
  }
  RecordProperty("cases", static_cast<int>(cases));
  RecordProperty("cases_moving_bytes", static_cast<int>(nonempty));
  RecordProperty("messages", static_cast<int>(messages));
  RecordProperty("wire_bytes", static_cast<int>(wire));
  RecordProperty("partial_cases", static_cast<int>(reduced));
  RecordProperty("partial_avg_cases", static_cast<int>(averaged));
  RecordProperty("refused_sub_byte", static_cast<int>(refused));
  RecordProperty("fanned_out", static_cast<int>(fanned));
  // Most cases move bytes, few sub-byte layouts are refused: the fuzz exercises the plan.
  EXPECT_GT(nonempty, cases / 2);
  EXPECT_GT(reduced, cases / 50);
  EXPECT_GT(fanned, cases / 100);  // cases where a relay forwards
  EXPECT_GT(averaged, cases / 500);
  EXPECT_LT(refused, cases / 10);
}

// Replicated sources (Replicate over 2-4 trainer ranks) to random layouts on up to 4
// disjoint engine ranks, tensors of at least 200 rows: besides the checks above, no
// source rank sends more than 1.05x the even split of the wire bytes.
TEST(ReshardFuzzTest, ReplicatedSourcesShareTheLoad) {
  const int64_t cases = EnvOr("SDRT_RESHARD_FUZZ_CASES", 10000) / 20;
  const int64_t seed = EnvOr("SDRT_RESHARD_FUZZ_SEED", 1);
  for (int64_t c = 0; c < cases && !HasFailure(); ++c) {
    Random rng(static_cast<uint64_t>(seed) * 7919u + static_cast<uint64_t>(c));
    const IntVector shape = {rng.Uniform(200, 400), rng.Uniform(1, 24)};
    const int64_t holders = rng.Uniform(2, 4);
    TransferLayout source;
    source.mesh = std::make_shared<const DeviceMesh>(
        *DeviceMesh::Create(IntVector{holders}, rng.Subset(4, holders)));
    source.placements = {Placement::Replicate()};
    TransferTensor tensor{absl::StrCat("replicated", c), DType::kBFloat16, shape, source,
                         RandomMesh(rng, 4, 2, /*first=*/4)};
    absl::StatusOr<internal::TransferPlan> plan =
        ReshardAndCheck({tensor}, {HashBytes(shape, tensor.dtype, static_cast<uint64_t>(c))});
    ASSERT_TRUE(plan.ok()) << "case " << c << ": " << plan.status();
    const double even = static_cast<double>(plan->stats.wire_bytes) / static_cast<double>(holders);
    EXPECT_LE(static_cast<double>(plan->stats.max_sent_bytes), 1.05 * even)
        << "case " << c << ": " << ShapeToString(shape) << " from " << LayoutString(tensor.source)
        << " to " << LayoutString(tensor.destination);
  }
}

}  // namespace
}  // namespace sdrt::test
