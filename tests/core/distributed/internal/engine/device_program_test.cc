// What CompileTransfer (core/distributed/internal/engine/program.h) decides for a device
// communicator, checked on any machine. A tensor with Partial contributions to reduce at its
// receivers is refused on every rank alike (also on ranks that receive no later
// contribution), before anything moves; chunks to themselves whose locals are on the
// communicator's device go local to local (CopiesToSelfDirectly, CopyToSelf: run here with
// CPU locals standing for a device's) instead of through the send bucket; and with ScheduleTransfer's chunk alignment of device buckets every chunk and
// unit starts on 16 bytes, which the MPI twin (reshard_mpi_test) runs between processes.
#include <cstdint>
#include <cstring>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/self_copy.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"

namespace sdrt::test {
namespace {

using internal::TransferProgram;
using ::testing::HasSubstr;

// Schedules `plan` (every rank's) for `rank` with `alignment` and small buckets.
internal::TransferSchedule ScheduleFor(const internal::TransferPlan& plan, int64_t rank,
                                       int64_t alignment = 1, int64_t bucket = 256) {
  internal::TransferScheduleOptions options;
  options.bucket_bytes = bucket;
  options.chunk_alignment = alignment;
  absl::StatusOr<internal::TransferSchedule> schedule =
      internal::ScheduleTransfer(plan, rank, options);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : internal::TransferSchedule();
}

// The exchanges every rank makes: the most of any rank's schedule in each phase.
internal::ExchangeCounts Busiest(const std::vector<internal::TransferSchedule>& schedules) {
  internal::ExchangeCounts most;
  for (const internal::TransferSchedule& s : schedules) {
    const auto direct = static_cast<int64_t>(s.direct_exchanges);
    most.direct = std::max(most.direct, direct);
    most.forward = std::max(most.forward, static_cast<int64_t>(s.exchanges()) - direct);
  }
  return most;
}

TEST(DeviceProgramTest, PartialReductionsAreRefusedOnEveryRankBeforeAnythingMoves) {
  // Partial(sum) over 2 ranks into Shard(0): rank 0 receives rank 1's contribution to its
  // half and rank 1 rank 0's; with 4 rows on a mesh of [2, 2] Partial x Shard only some
  // ranks reduce, and every rank must still refuse.
  for (const char* source : {"[P(sum)]", "[P(sum), S(1)]"}) {
    const bool two_dims = std::strchr(source, ',') != nullptr;
    const std::vector<internal::TransferTensor> tensors = {
        Describe("grad", DType::kFloat32, {4, 6},
                 two_dims ? MeshLayout({2, 2}, {}, source) : MeshLayout({2}, {}, source),
                 two_dims ? MeshLayout({2, 2}, {}, "[S(0), S(1)]")
                          : MeshLayout({2}, {}, "[S(0)]"))};
    absl::StatusOr<internal::TransferPlan> plan = internal::PlanTransfer(tensors, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_GT(plan->tensors[0].contributions(), 1);
    const int64_t world = two_dims ? 4 : 2;
    std::vector<internal::TransferSchedule> schedules;
    for (int64_t r = 0; r < world; ++r) schedules.push_back(ScheduleFor(*plan, r));
    for (int64_t r = 0; r < world; ++r) {
      const Tensor full = HashBytes(tensors[0].shape, tensors[0].dtype, 5);
      absl::StatusOr<RankLocals> src = PieceLocals(full, tensors[0], /*source=*/true);
      absl::StatusOr<RankLocals> dst = PieceLocals(full, tensors[0], /*source=*/false);
      ASSERT_TRUE(src.ok() && dst.ok());
      internal::TransferLocals sources, destinations;
      sources.Add((*src)[r]);
      destinations.Add((*dst)[r]);
      for (const Device device : {Device::CUDA(0), Device::CPU()}) {
        absl::StatusOr<TransferProgram> program = internal::CompileTransfer(
            *plan, schedules[r], Busiest(schedules), internal::TransferSite(r, world, device),
            sources, destinations);
        if (device.is_cpu()) {
          EXPECT_TRUE(program.ok()) << "rank " << r << ": " << program.status();
          continue;
        }
        EXPECT_EQ(program.status().code(), absl::StatusCode::kUnimplemented)
            << source << " rank " << r << ": " << program.status();
        EXPECT_THAT(program.status().message(), HasSubstr("'grad'"));
        EXPECT_THAT(program.status().message(), HasSubstr("cuda:0"));
      }
    }
  }
}

TEST(DeviceProgramTest, ChunksToItselfCopyLocalToLocalWhereBothLocalsAreOnTheDevice) {
  // A mesh of one: every chunk goes to the rank itself. Sources laid out transposed or
  // narrowed (no dense range to memmove), destinations contiguous; bfloat16 and an odd
  // uint8 shape. CopyToSelf copies each chunk's boxes local to local (here on the CPU,
  // whose locals stand for a device's); with the locals on another device than the
  // communicator's the chunk goes through the bucket instead.
  const std::vector<internal::TransferTensor> tensors = {
      Describe("q", DType::kBFloat16, {24, 10}, MeshLayout({1}, {}, "[S(0)]"),
               MeshLayout({1}, {}, "[S(1)]")),
      Describe("bytes", DType::kUInt8, {7, 13}, MeshLayout({1}, {}, "[R]"),
               MeshLayout({1}, {}, "[S(0)]")),
  };
  for (const LocalLayout layout : {LocalLayout::kTransposed, LocalLayout::kNarrowed}) {
    absl::StatusOr<internal::TransferPlan> plan = internal::PlanTransfer(tensors, {});
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Buckets of 64 bytes cut the boxes into many chunks, each its own copy.
    const internal::TransferSchedule schedule = ScheduleFor(*plan, 0, 16, 64);
    ASSERT_GT(schedule.steps.size(), tensors.size());
    std::vector<std::vector<Tensor>> sources(tensors.size()), results(tensors.size()),
        expected(tensors.size());
    internal::TransferLocals from, to;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const Tensor full = HashBytes(tensors[t].shape, tensors[t].dtype, 40 + t);
      sources[t].push_back(*Relayout((*PieceLocals(full, tensors[t], true))[0][0], layout));
      expected[t] = (*PieceLocals(full, tensors[t], false))[0];
      results[t].push_back(*Tensor::Zeros(expected[t][0].shape(), tensors[t].dtype));
      from.Add(sources[t]);
      to.Add(results[t]);
    }
    for (const internal::TransferSchedule::Step& step : schedule.steps) {
      const internal::TransferTensorPlan& tp = plan->tensors[step.tensor];
      ASSERT_TRUE(internal::CopiesToSelfDirectly(tp, *step.chunk, from.of(step.tensor),
                                                 to.of(step.tensor), Device::CPU()));
      EXPECT_FALSE(internal::CopiesToSelfDirectly(tp, *step.chunk, from.of(step.tensor),
                                                  to.of(step.tensor), Device::CUDA(0)))
          << "CPU locals of a CUDA communicator go through its bucket";
      const absl::Status copied = internal::CopyToSelf(
          tp, *step.chunk, from.of(step.tensor), to.of(step.tensor), false, nullptr);
      ASSERT_TRUE(copied.ok()) << copied;
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      ASSERT_EQ(results[t][0].nbytes(), expected[t][0].nbytes());
      EXPECT_EQ(std::memcmp(results[t][0].data_ptr(), expected[t][0].data_ptr(),
                            expected[t][0].nbytes()),
                0)
          << tensors[t].name;
    }
  }
  // A strided source (_StridedShard on a mesh of one has several runs on its dim) is not
  // one view: through the bucket.
  absl::StatusOr<internal::TransferPlan> strided = internal::PlanTransfer(
      {Describe("s", DType::kFloat32, {8, 4}, MeshLayout({1}, {}, "[_S(0, 2)]"),
                MeshLayout({1}, {}, "[S(0)]"))},
      {});
  ASSERT_TRUE(strided.ok()) << strided.status();
  const internal::TransferTensorPlan& tp = strided->tensors[0];
  const IntVector local_shape = tp.source()[0].local_shape;
  const std::vector<Tensor> src = {*Tensor::Zeros(local_shape, DType::kFloat32)};
  const std::vector<Tensor> dst = {*Tensor::Zeros(tp.destination()[0].local_shape,
                                                  DType::kFloat32)};
  internal::TransferLocals from, to;
  from.Add(src);
  to.Add(dst);
  bool any_direct = false;
  for (const internal::TransferMessage& m : tp.messages()) {
    any_direct = any_direct || internal::CopiesToSelfDirectly(tp, m, from.of(0), to.of(0),
                                                              Device::CPU());
  }
  EXPECT_EQ(any_direct, tp.source()[0].runs[0].size() == 1);
}

TEST(DeviceProgramTest, AlignedChunksStartOn16BytesAndBothSidesAgree) {
  // Odd byte counts (uint8 rows of 13, bfloat16 rows of 5) ahead of float32 chunks, between
  // 2 ranks, with buckets that hold several chunks: every unit starts on 16 bytes in its
  // bucket and every chunk on 16 bytes from its unit's start, on the sender as on the
  // receiver, and a unit's bytes are the same on both sides.
  const std::vector<internal::TransferTensor> tensors = {
      Describe("a", DType::kUInt8, {6, 13}, MeshLayout({2}, {}, "[S(0)]"),
               MeshLayout({2}, {}, "[S(1)]")),
      Describe("b", DType::kBFloat16, {4, 5}, MeshLayout({2}, {}, "[S(1)]"),
               MeshLayout({2}, {}, "[S(0)]")),
      Describe("c", DType::kFloat32, {8, 3}, MeshLayout({2}, {}, "[S(0)]"),
               MeshLayout({2}, {}, "[R]")),
  };
  absl::StatusOr<internal::TransferPlan> plan = internal::PlanTransfer(tensors, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const int64_t bad : {0, 3, 512}) {
    internal::TransferScheduleOptions options;
    options.chunk_alignment = bad;
    EXPECT_EQ(internal::ScheduleTransfer(*plan, 0, options).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  std::vector<internal::TransferSchedule> schedules = {ScheduleFor(*plan, 0, 16, 512),
                                                       ScheduleFor(*plan, 1, 16, 512)};
  std::vector<int64_t> sent[2], received[2];
  for (int64_t r = 0; r < 2; ++r) {
    const internal::TransferSchedule& s = schedules[r];
    ASSERT_GT(s.exchanges(), 0u);
    for (const internal::TransferSchedule::Unit& u : s.units) {
      if (u.source_rank == u.destination_rank) continue;
      int64_t at = 0;
      for (size_t j = u.first; j < u.first + u.count; ++j) {
        at = internal::AlignUp(at, 16) + s.steps[j].chunk->bytes;
      }
      EXPECT_EQ(u.bytes, at) << "rank " << r << ": a unit's bytes hold its aligned chunks";
      (u.source_rank == r ? sent[r] : received[r]).push_back(u.bytes);
    }
    // Compiled on the host (CPU buckets, whose addresses are checked): units on 16 bytes.
    std::vector<std::vector<Tensor>> src(tensors.size()), dst(tensors.size());
    internal::TransferLocals sources, destinations;
    for (size_t t = 0; t < tensors.size(); ++t) {
      const Tensor full = HashBytes(tensors[t].shape, tensors[t].dtype, 60 + t);
      src[t] = (*PieceLocals(full, tensors[t], true))[r];
      dst[t] = (*PieceLocals(full, tensors[t], false))[r];
      sources.Add(src[t]);
      destinations.Add(dst[t]);
    }
    absl::StatusOr<TransferProgram> program = internal::CompileTransfer(
        *plan, s, Busiest(schedules), internal::TransferSite(r, 2, Device::CPU()), sources,
        destinations);
    ASSERT_TRUE(program.ok()) << program.status();
    const auto* send_base = static_cast<const char*>(program->send_bucket->data());
    const auto* receive_base = static_cast<const char*>(program->receive_bucket->data());
    for (const auto& m : program->sends) {
      EXPECT_EQ((static_cast<const char*>(m.data) - send_base) % 16, 0) << "rank " << r;
    }
    for (const auto& m : program->receives) {
      EXPECT_EQ((static_cast<const char*>(m.data) - receive_base) % 16, 0) << "rank " << r;
    }
  }
  EXPECT_EQ(sent[0], received[1]);
  EXPECT_EQ(sent[1], received[0]);
}

}  // namespace
}  // namespace sdrt::test
