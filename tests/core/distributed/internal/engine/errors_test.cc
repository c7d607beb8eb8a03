// PlanTransfer's refusals (every message names the tensor) and its sub-byte dtypes: pieces
// and the slabs of a shared cell never cut inside a byte (tensor/sharding/byte_cuts.h).
#include <chrono>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/tensor/sharding/byte_cuts.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::PlanTransfer;
using internal::TransferPlan;
using internal::TransferTensor;
using ::testing::HasSubstr;

absl::Status PlanError(const TransferTensor& tensor, internal::TransferPlanOptions options = {}) {
  return PlanTransfer({tensor}, options).status();
}

TEST(ReshardErrorsTest, PartialThatCannotBeReducedIsRefusedAndAPartialDestinationTakesAtZero) {
  const internal::TransferLayout s0 = MeshLayout({2}, {}, "[S(0)]");
  // avg of an integer: PyTorch refuses it (its avg divides in place), so does the planner.
  const absl::Status avg =
      PlanError(Describe("grad", DType::kInt32, {4, 4}, MeshLayout({2}, {}, "[P(avg)]"), s0));
  EXPECT_EQ(avg.code(), absl::StatusCode::kInvalidArgument) << avg;
  EXPECT_THAT(avg.message(), HasSubstr("'grad'"));
  EXPECT_THAT(avg.message(), HasSubstr("floating dtypes only"));
  EXPECT_EQ(
      PlanError(Describe("grad", DType::kBool, {4, 4}, MeshLayout({2}, {}, "[P(avg)]"), s0)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(internal::PlanTransfer(
                  {Describe("grad", DType::kFloat32, {4, 4}, MeshLayout({2}, {}, "[P(avg)]"), s0)})
                  .ok());
  const absl::Status mixed = PlanError(
      Describe("grad", DType::kFloat32, {4, 4}, MeshLayout({2, 2}, {}, "[P(sum), P(max)]"), s0));
  EXPECT_EQ(mixed.code(), absl::StatusCode::kUnimplemented) << mixed;
  const absl::Status fp8 = PlanError(
      Describe("grad", DType::kFloat8E4M3FN, {4, 4}, MeshLayout({2}, {}, "[P(sum)]"), s0));
  EXPECT_EQ(fp8.code(), absl::StatusCode::kInvalidArgument) << fp8;
  EXPECT_THAT(fp8.message(), HasSubstr("cannot be reduced"));
  // A Partial destination (a broadcast or a load into Partial DTensors): the pieces at
  // coordinate 0 take the value, the others nothing (their verbs fill the identity). The
  // public reshard refuses it (MergeLeafLayouts).
  absl::StatusOr<internal::TransferPlan> partial = internal::PlanTransfer(
      {Describe("grad", DType::kFloat32, {4, 4}, s0, MeshLayout({2}, {}, "[P(sum)]"))});
  ASSERT_TRUE(partial.ok()) << partial.status();
  const internal::TransferTensorPlan& tp = partial->tensors[0];
  ASSERT_EQ(tp.destination().size(), 2u);
  EXPECT_FALSE(tp.destination()[0].identity);
  EXPECT_TRUE(tp.destination()[1].identity);
  for (const internal::TransferMessage& m : tp.messages()) {
    EXPECT_EQ(m.destination_rank, 0) << "only coordinate 0 takes the value";
  }
}

TEST(ReshardErrorsTest, HostileDescriptorsNameTheTensor) {
  const internal::TransferLayout s0 = MeshLayout({2}, {}, "[S(0)]");
  std::vector<absl::Status> errors = {
      // 13 dims
      PlanError(Describe("deep", DType::kFloat32, IntVector(13, 1), MeshLayout({2}, {}, "[R]"),
                         MeshLayout({2}, {}, "[R]"))),
      // element count overflows
      PlanError(Describe("huge", DType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, s0, s0)),
      // a shard dim the tensor lacks
      PlanError(Describe("dim", DType::kFloat32, {4}, MeshLayout({2}, {}, "[S(1)]"), s0)),
      // a box outside the tensor, of the wrong rank, negative
      PlanError(Describe("box", DType::kFloat32, {4, 4}, s0, BoxLayout({{{2, 0}, {3, 4}, 0}}))),
      PlanError(Describe("box", DType::kFloat32, {4, 4}, s0, BoxLayout({{{0}, {4}, 0}}))),
      PlanError(Describe("box", DType::kFloat32, {4, 4}, s0, BoxLayout({{{0, 0}, {4, 4}, -1}}))),
      // nobody holds rows 2..4
      PlanError(Describe("hole", DType::kFloat32, {4, 4}, BoxLayout({{{0, 0}, {2, 4}, 0}}),
                         MeshLayout({1}, {1}, "[R]"))),
      // a _StridedShard over a dim too long for index lists on every rank
      PlanError(Describe("long", DType::kUInt8, {int64_t{1} << 28},
                         MeshLayout({2}, {}, "[_S(0, 2)]"), s0)),
  };
  for (const absl::Status& s : errors) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("tensor '")) << s;
  }
  EXPECT_THAT(errors[6].message(), HasSubstr("no source rank holds"));
  // Too many cells for the options: 8 x 8 grid of cells, allowed 32.
  internal::TransferPlanOptions small;
  small.max_cells = 32;
  const absl::Status cells =
      PlanError(Describe("grid", DType::kFloat32, {8, 8}, MeshLayout({8}, {}, "[S(0)]"),
                         MeshLayout({8}, {}, "[S(1)]")),
                small);
  EXPECT_EQ(cells.code(), absl::StatusCode::kInvalidArgument) << cells;
  EXPECT_THAT(cells.message(), HasSubstr("max_cells"));
}

TEST(ReshardErrorsTest, SubByteLayoutCutInsideAByteIsRefused) {
  // F4 [4, 3]: Shard(1) over 3 ranks leaves one 4-bit element per row: half a byte.
  const absl::Status s =
      PlanError(Describe("w", DType::kFloat4E2M1FNx2, {4, 3}, MeshLayout({1}, {}, "[R]"),
                         MeshLayout({3}, {}, "[S(1)]")));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("'w'"));
}

// Sub-byte moves: every box of the plan begins and ends on whole bytes.
void ExpectWholeByteBoxes(const TransferPlan& plan) {
  for (const internal::TransferTensorPlan& t : plan.tensors) {
    for (const internal::TransferMessage& m : t.messages()) {
      for (const internal::TransferMove& move : m.moves) {
        IntVector size(move.begin.size());
        for (size_t d = 0; d < size.size(); ++d) size[d] = move.end[d] - move.begin[d];
        EXPECT_EQ(internal::FirstSubByteCut(t.dtype, t.shape, internal::BoxRuns(move.begin, size)), -1)
            << t.name << " box at " << ShapeToString(move.begin);
      }
    }
  }
}

TEST(ReshardErrorsTest, SubByteDtypesNeverCutInsideAByte) {
  for (DType dtype : {DType::kFloat4E2M1FNx2, DType::kFloat6E2M3FN}) {
    const std::vector<TransferTensor> tensors = {
        Describe("a", dtype, {4, 8}, MeshLayout({2}, {}, "[S(0)]"),
                 MeshLayout({2}, {2, 3}, "[S(1)]")),
        // A replicated [1, 12] row over 2 holders to one rank: halves of 6 elements are
        // whole bytes for 4 bits (3 bytes), not for 6 bits (4.5): then one holder sends it.
        Describe("b", dtype, {1, 12}, MeshLayout({2}, {}, "[R]"), MeshLayout({1}, {2}, "[R]")),
        Describe("c", dtype, {6, 8}, MeshLayout({2, 2}, {}, "[R, S(0)]"),
                 MeshLayout({3}, {4, 5, 6}, "[S(0)]")),
    };
    std::vector<Tensor> fulls;
    for (const TransferTensor& t : tensors) fulls.push_back(HashBytes(t.shape, t.dtype, 3));
    absl::StatusOr<TransferPlan> plan = ReshardAndCheck(tensors, fulls);
    ASSERT_TRUE(plan.ok()) << DTypeName(dtype) << ": " << plan.status();
    ExpectWholeByteBoxes(*plan);
  }
}

// A rank whose messages would be cut into more than 2^22 chunks is refused before the
// chunks are made: a header describing one tensor of 2^60 bytes costs no memory and no
// time to refuse (a schedule of 2^22 chunks takes 2 GB). The message says what the
// bucket has to do with it.
TEST(ReshardErrorsTest, TooManyChunksAreRefusedBeforeTheyAreMade) {
  const internal::TransferTensor huge =
      Describe("w", DType::kBFloat16, {int64_t{1} << 44, 512}, MeshLayout({2}, {}, "[S(0)]"),
               MeshLayout({2}, {}, "[S(1)]"));
  absl::StatusOr<TransferPlan> plan = PlanTransfer({huge});
  ASSERT_TRUE(plan.ok()) << plan.status();
  internal::TransferScheduleOptions options;
  options.bucket_bytes = int64_t{1} << 28;
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<internal::TransferSchedule> schedule =
      internal::ScheduleTransfer(*plan, 0, options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(schedule.ok());
  EXPECT_EQ(schedule.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(schedule.status().message(), HasSubstr("more than 2^22 reshard chunks"));
  EXPECT_THAT(schedule.status().message(), HasSubstr("268435456 bytes: a larger bucket"));
  EXPECT_LT(seconds, 5.0) << "refused only after cutting the chunks";
  // The same tensor in buckets large enough for it is scheduled.
  options.bucket_bytes = int64_t{1} << 40;
  EXPECT_TRUE(internal::ScheduleTransfer(*plan, 0, options).ok());
}

}  // namespace
}  // namespace sdrt::test
