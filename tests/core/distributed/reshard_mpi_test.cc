// Multi-rank tests of the reshard executor (core/distributed/internal/engine/schedule.h)
// over MPI: the real planner, the real packing and Communicator::Exchange between real
// processes. Every rank derives the same plan and schedule from the same descriptors,
// holds its source pieces (cut from a full tensor every rank can make from a seed) and
// checks its destination pieces bit-exact against DistributeTensor's, with buckets small
// enough that messages are cut and spread over many exchanges. The ranks' sent bytes add up
// to the plan's wire bytes, which equal the optimum. CTest runs it under `mpiexec -n N`,
// N = 1..4 and 8 (3 ranks: uneven pieces; 8: the trainer/engine halves of 4).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tests/core/distributed/internal/engine/random.h"
#include "sdrt/tests/core/distributed/internal/engine/simulator.h"
#include "sdrt/tests/support/fill.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt::test {
namespace {

MpiCommunicator* g_world = nullptr;

int64_t Sum(int64_t mine) {
  absl::StatusOr<std::vector<std::string>> all =
      g_world->AllGatherBytes(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  EXPECT_TRUE(all.ok());
  int64_t total = 0;
  for (const std::string& s : *all) {
    int64_t v = 0;
    std::memcpy(&v, s.data(), sizeof(v));
    total += v;
  }
  return total;
}

std::vector<int64_t> Ranks(int64_t from, int64_t to) {
  std::vector<int64_t> r;
  for (int64_t i = from; i < to; ++i) r.push_back(i);
  return r;
}

// Plans `tensors`, runs the plan with buckets of `bucket` bytes and checks every rank's
// destination pieces against the full tensors' pieces; `layout` lays out the sources.
// One transfer, compiled and run once, as TransferRun does for a one-shot verb.
absl::Status ExecuteTransfer(const internal::TransferPlan& plan,
                             const internal::TransferSchedule& schedule,
                             internal::ExchangeCounts exchanges, Communicator& comm,
                             internal::TransferLocals& sources,
                             internal::TransferLocals& destinations,
                             internal::TransferRunStats* stats) {
  SDRT_ASSIGN_OR_RETURN(const internal::TransferProgram program,
                        internal::CompileTransfer(plan, schedule, exchanges, comm, sources,
                                                  destinations));
  SDRT_RETURN_IF_ERROR(
      internal::RunTransfer(program, plan, schedule, &comm, sources, destinations));
  *stats = program.stats;
  return absl::OkStatus();
}

// The exchanges every rank makes: the most of any rank's schedule of `every` (the plan of
// every rank) in each phase.
absl::StatusOr<internal::ExchangeCounts> BusiestExchanges(
    const internal::TransferPlan& every, const internal::TransferScheduleOptions& options) {
  internal::ExchangeCounts exchanges;
  for (int64_t r = 0; r < g_world->size(); ++r) {
    SDRT_ASSIGN_OR_RETURN(const internal::TransferSchedule theirs,
                          internal::ScheduleTransfer(every, r, options));
    const int64_t direct = static_cast<int64_t>(theirs.direct_exchanges);
    exchanges.direct = std::max(exchanges.direct, direct);
    exchanges.forward =
        std::max(exchanges.forward, static_cast<int64_t>(theirs.exchanges()) - direct);
  }
  return exchanges;
}

void ReshardOverMpi(const std::vector<internal::TransferTensor>& tensors, int64_t bucket,
                    LocalLayout layout = LocalLayout::kContiguous,
                    const std::vector<int64_t>& nodes = {},
                    internal::TransferRunStats* stats_out = nullptr, int64_t alignment = 1) {
  const int64_t me = g_world->rank();
  // This rank's plan, checked against the plan of every rank: the same stats, the same
  // schedule for this rank; the exchanges every rank makes are the busiest rank's.
  internal::TransferPlanOptions mine, all;
  mine.rank = me;
  mine.node_of_rank = all.node_of_rank = nodes;
  absl::StatusOr<internal::TransferPlan> plan = internal::PlanTransfer(tensors, mine);
  absl::StatusOr<internal::TransferPlan> every = internal::PlanTransfer(tensors, all);
  ASSERT_TRUE(plan.ok() && every.ok()) << plan.status() << every.status();
  EXPECT_EQ(plan->stats.wire_bytes, plan->stats.optimum_bytes);
  EXPECT_EQ(plan->stats.wire_bytes, every->stats.wire_bytes);
  EXPECT_EQ(plan->stats.max_sent_bytes, every->stats.max_sent_bytes);
  EXPECT_EQ(plan->stats.max_received_bytes, every->stats.max_received_bytes);
  EXPECT_EQ(plan->stats.messages, every->stats.messages);
  internal::TransferScheduleOptions options;
  options.bucket_bytes = bucket;
  options.chunk_alignment = alignment;
  absl::StatusOr<internal::TransferSchedule> schedule =
      internal::ScheduleTransfer(*plan, me, options);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  internal::ExchangeCounts exchanges;
  for (int64_t r = 0; r < g_world->size(); ++r) {
    absl::StatusOr<internal::TransferSchedule> theirs =
        internal::ScheduleTransfer(*every, r, options);
    ASSERT_TRUE(theirs.ok()) << theirs.status();
    const int64_t direct = static_cast<int64_t>(theirs->direct_exchanges);
    exchanges.direct = std::max(exchanges.direct, direct);
    exchanges.forward =
        std::max(exchanges.forward, static_cast<int64_t>(theirs->exchanges()) - direct);
    if (r == me) {
      EXPECT_EQ(theirs->exchanges(), schedule->exchanges());
      EXPECT_EQ(theirs->steps.size(), schedule->steps.size());
    }
  }
  std::vector<std::vector<Tensor>> sources(tensors.size()), destinations(tensors.size()),
      expected(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const Tensor full = HashBytes(tensors[t].shape, tensors[t].dtype, 1000 + t);
    absl::StatusOr<RankLocals> src = PieceLocals(full, tensors[t], /*source=*/true);
    absl::StatusOr<RankLocals> dst = PieceLocals(full, tensors[t], /*source=*/false);
    ASSERT_TRUE(src.ok() && dst.ok());
    for (const Tensor& local : (*src)[me]) sources[t].push_back(*Relayout(local, layout));
    expected[t] = (*dst)[me];
    for (const Tensor& local : expected[t]) {
      destinations[t].push_back(*Tensor::Zeros(local.shape(), local.dtype()));
    }
  }
  internal::TransferRunStats stats;
  internal::TransferLocals source_locals, destination_locals;
  for (size_t t = 0; t < tensors.size(); ++t) {
    source_locals.Add(sources[t]);
    destination_locals.Add(destinations[t]);
  }
  const absl::Status s = ExecuteTransfer(*plan, *schedule, exchanges, *g_world, source_locals,
                                         destination_locals, &stats);
  ASSERT_TRUE(s.ok()) << s;
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (size_t i = 0; i < expected[t].size(); ++i) {
      const Tensor& got = destinations[t][i];
      ASSERT_EQ(got.nbytes(), expected[t][i].nbytes());
      EXPECT_TRUE(got.nbytes() == 0 ||
                  std::memcmp(got.data_ptr(), expected[t][i].data_ptr(), got.nbytes()) == 0)
          << tensors[t].name << " local " << i << " on rank " << me;
    }
  }
  EXPECT_EQ(stats.rounds, exchanges.direct + exchanges.forward);
  EXPECT_LE(stats.buffer_bytes, 3 * std::max<int64_t>(bucket, 4096));
  // Aligned chunks carry their padding on the wire.
  const int64_t sent = Sum(stats.sent_bytes);
  EXPECT_EQ(sent, Sum(stats.received_bytes));
  if (alignment == 1) {
    EXPECT_EQ(sent, plan->stats.wire_bytes);
  } else {
    EXPECT_GE(sent, plan->stats.wire_bytes);
  }
  EXPECT_EQ(Sum(stats.self_bytes), plan->stats.self_bytes);
  if (stats_out != nullptr) *stats_out = stats;
}

std::vector<internal::TransferTensor> Mixed() {
  const int64_t n = g_world->size();
  const int64_t half = std::max<int64_t>(1, n / 2);
  const auto all = Ranks(0, n);
  const auto trainer = Ranks(0, half);
  const auto engine = n > 1 ? Ranks(half, n) : Ranks(0, 1);
  std::vector<internal::TransferTensor> t = {
      // fsdp -> tp on the same ranks, uneven rows and columns.
      Describe("fsdp_to_tp", DType::kFloat32, {7, 5}, MeshLayout({n}, all, "[S(0)]"),
               MeshLayout({n}, all, "[S(1)]")),
      // trainer ranks -> disjoint engine ranks, bf16.
      Describe("trainer_to_engine", DType::kBFloat16, {33, 17},
               MeshLayout({half}, trainer, "[S(0)]"),
               MeshLayout({static_cast<int64_t>(engine.size())}, engine, "[S(1)]")),
      // replicated on every rank -> sharded: the holders share the sending.
      Describe("replicated_to_fsdp", DType::kInt32, {64, 3}, MeshLayout({n}, all, "[R]"),
               MeshLayout({static_cast<int64_t>(engine.size())}, engine, "[S(0)]")),
      // _StridedShard (FSDP over TP) -> plain rows.
      Describe("strided", DType::kFloat16, {12, 4}, MeshLayout({n}, all, "[_S(0, 2)]"),
               MeshLayout({n}, all, "[S(0)]")),
      // case-052: chunks of size zero, [2, 8] over every rank -> Shard(1) -> back.
      Describe("case052", DType::kInt64, {2, 8}, MeshLayout({n}, all, "[S(0)]"),
               MeshLayout({n}, all, "[S(1)]")),
      // A 0-dim tensor and a ShardedTensor box layout on the destination.
      Describe("scalar", DType::kFloat64, IntVector(), MeshLayout({n}, all, "[R]"),
               MeshLayout({1}, {n - 1}, "[R]")),
      Describe("to_boxes", DType::kUInt8, {10, 6}, MeshLayout({n}, all, "[S(0)]"),
               BoxLayout({{{0, 0}, {10, 3}, n - 1}, {{0, 3}, {10, 3}, 0}})),
  };
  if (n == 4) {
    // 2-D meshes: fsdp-tp [S(0), S(1)] on 2x2 -> tp over 4 ranks of another order.
    t.push_back(Describe("mesh2d", DType::kFloat32, {9, 10},
                         MeshLayout({2, 2}, all, "[S(0), S(1)]"),
                         MeshLayout({4}, {3, 1, 2, 0}, "[S(1)]")));
  }
  return t;
}

TEST(ReshardMpi, EveryLayoutPairBitExactWithSmallBuckets) {
  for (int64_t bucket : {int64_t{64}, int64_t{1000}, int64_t{1} << 20}) {
    SCOPED_TRACE(bucket);
    ReshardOverMpi(Mixed(), bucket);
  }
}

// Chunks laid out as device buckets lay them out (ScheduleTransfer's chunk_alignment 16: each
// chunk on 16 bytes in its unit, each unit on 16 bytes in its bucket), between processes:
// sender and receiver agree on every padded unit, with and without fan-out forwards.
TEST(ReshardMpi, ChunksOnSixteenBytesAsInDeviceBuckets) {
  std::vector<int64_t> nodes;
  for (int r = 0; r < g_world->size(); ++r) nodes.push_back(r < g_world->size() / 2 ? 0 : 1);
  for (int64_t bucket : {int64_t{64}, int64_t{1000}}) {
    SCOPED_TRACE(bucket);
    ReshardOverMpi(Mixed(), bucket, LocalLayout::kTransposed, {}, nullptr, 16);
    ReshardOverMpi(Mixed(), bucket, LocalLayout::kContiguous, nodes, nullptr, 16);
  }
}

// The same with the ranks on two nodes (the first half and the rest): fan-out forwards
// run after the direct exchanges.
TEST(ReshardMpi, FanOutOverTwoNodes) {
  std::vector<int64_t> nodes;
  for (int r = 0; r < g_world->size(); ++r) nodes.push_back(r < g_world->size() / 2 ? 0 : 1);
  for (int64_t bucket : {int64_t{256}, int64_t{1} << 20})
    ReshardOverMpi(Mixed(), bucket, LocalLayout::kContiguous, nodes);
}

// Issue 14's proof under mpiexec: 300 random layout pairs of the fuzz's kind (meshes of 1-3
// axes over random subsets of this world with Shard, Replicate and _StridedShard, or
// ShardedTensor boxes; no sub-byte dtypes, no Partial), in two plans of 150 tensors, the
// second with the ranks on random nodes (fan-out). The same seed on every rank.
TEST(ReshardMpi, RandomLayoutsOfThisWorld) {
  constexpr DType kDTypes[] = {DType::kFloat32, DType::kBFloat16,  DType::kUInt8,
                               DType::kInt64,   DType::kComplex64, DType::kFloat8E4M3FN,
                               DType::kBool};
  const int64_t world = g_world->size();
  Random rng(4242);
  for (const bool with_nodes : {false, true}) {
    SCOPED_TRACE(with_nodes ? "on random nodes" : "one node each");
    std::vector<internal::TransferTensor> tensors;
    for (int c = 0; c < 150; ++c) {
      const DType dtype = kDTypes[rng.Uniform(0, std::size(kDTypes) - 1)];
      const int ndim = static_cast<int>(rng.Uniform(0, 3));
      IntVector shape;
      for (int d = 0; d < ndim; ++d) shape.push_back(rng.Chance(5) ? 0 : rng.Uniform(1, 7));
      auto layout = [&] {
        return rng.Chance(15) ? RandomBoxes(rng, world, shape) : RandomMesh(rng, world, ndim);
      };
      internal::TransferLayout source = layout();
      tensors.push_back({absl::StrCat("random", c), dtype, shape, std::move(source), layout()});
    }
    std::vector<int64_t> nodes;
    if (with_nodes) {
      for (int64_t r = 0; r < world; ++r) nodes.push_back(rng.Uniform(0, 2));
    }
    ReshardOverMpi(tensors, 4096, LocalLayout::kContiguous, nodes);
  }
}

// Chunks of 64 KiB and more whose boxes are dense ranges of their locals go on the wire
// from the source local and land in the destination local (no bucket); the others, and
// every box of a transposed or narrowed source, are packed. Every layout bit-exact, and
// the direct bytes counted where the boxes are rows of contiguous locals.
TEST(ReshardMpi, LargeBoxesTravelFromAndIntoTheirLocals) {
  const int64_t n = g_world->size();
  const auto all = Ranks(0, n);
  const std::vector<internal::TransferTensor> tensors = {
      // Rows to every rank: each rank's rows are one dense range on both sides.
      Describe("rows_to_replicated", DType::kFloat32, {2048, 96}, MeshLayout({n}, all, "[S(0)]"),
               MeshLayout({n}, all, "[R]")),
      // Rows to columns: neither side's box is dense (packed).
      Describe("rows_to_columns", DType::kBFloat16, {1024, 256}, MeshLayout({n}, all, "[S(0)]"),
               MeshLayout({n}, all, "[S(1)]")),
      // Replicated to rows: the holders share the sending, dense boxes.
      Describe("replicated_to_rows", DType::kInt32, {2048, 64}, MeshLayout({n}, all, "[R]"),
               MeshLayout({n}, all, "[S(0)]")),
      // A small tensor between them: it joins its pair's unit.
      Describe("small", DType::kFloat32, {7, 5}, MeshLayout({n}, all, "[S(0)]"),
               MeshLayout({n}, all, "[R]")),
  };
  for (int64_t bucket : {int64_t{100000}, int64_t{1} << 20}) {
    SCOPED_TRACE(bucket);
    internal::TransferRunStats stats;
    ReshardOverMpi(tensors, bucket, LocalLayout::kContiguous, {}, &stats);
    if (n > 1) {
      EXPECT_GT(Sum(stats.direct_bytes), 0);
    }
    ReshardOverMpi(tensors, bucket, LocalLayout::kTransposed);
    ReshardOverMpi(tensors, bucket, LocalLayout::kNarrowed);
    // On two nodes the replicated destinations are fed by forwards from the relays' locals.
    std::vector<int64_t> nodes;
    for (int64_t r = 0; r < n; ++r) nodes.push_back(r < n / 2 ? 0 : 1);
    ReshardOverMpi(tensors, bucket, LocalLayout::kContiguous, nodes);
  }
}

TEST(ReshardMpi, Case050TransposedAndNarrowedSourcesSendTheirValues) {
  ReshardOverMpi(Mixed(), 256, LocalLayout::kTransposed);
  ReshardOverMpi(Mixed(), 256, LocalLayout::kNarrowed);
}

TEST(ReshardMpi, Case053FsdpOfEightRanksIntoThisWorld) {
  // A checkpoint's layout of 8 fsdp pieces, held 8 / N per rank as boxes, into fsdp over
  // this world: every rank's rows are its torch.chunk rows.
  const int64_t n = g_world->size();
  std::vector<internal::TransferBox> boxes;
  for (int64_t r = 0; r < 8; ++r) boxes.push_back({{2 * r, 0}, {2, 3}, r % n});
  ReshardOverMpi({Describe("case053", DType::kFloat32, {16, 3}, BoxLayout(boxes),
                           MeshLayout({n}, Ranks(0, n), "[S(0)]"))},
                 128);
}

// A rank whose own step fails in the middle of a run (a source local that does not fit its
// piece, handed over as checked so that compiling does not catch it) still makes every
// exchange: the other ranks finish theirs at once instead of waiting for the deadline, and
// the closing (CloseTransfer, as every verb ends) gives every rank that rank's error.
TEST(ReshardMpi, AStepFailingOnOneRankReachesEveryRankBeforeTheDeadline) {
  const int64_t n = g_world->size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int64_t me = g_world->rank();
  const std::vector<internal::TransferTensor> tensors = {
      Describe("w", DType::kFloat32, {16 * n, 4 * n}, MeshLayout({n}, Ranks(0, n), "[S(0)]"),
               MeshLayout({n}, Ranks(0, n), "[S(1)]"))};
  internal::TransferPlanOptions mine;
  mine.rank = me;
  absl::StatusOr<internal::TransferPlan> plan = internal::PlanTransfer(tensors, mine);
  absl::StatusOr<internal::TransferPlan> every = internal::PlanTransfer(tensors, {});
  ASSERT_TRUE(plan.ok() && every.ok());
  internal::TransferScheduleOptions options;
  options.bucket_bytes = 64;  // many exchanges: the failure comes early in the run
  absl::StatusOr<internal::TransferSchedule> schedule =
      internal::ScheduleTransfer(*plan, me, options);
  absl::StatusOr<internal::ExchangeCounts> exchanges = BusiestExchanges(*every, options);
  ASSERT_TRUE(schedule.ok() && exchanges.ok());
  ASSERT_GT(exchanges->direct, 1) << "one exchange";
  const Tensor full = HashBytes(tensors[0].shape, tensors[0].dtype, 9);
  std::vector<Tensor> sources = (*PieceLocals(full, tensors[0], true))[me];
  if (me == 1) sources[0] = *Tensor::Zeros({1, 1}, DType::kFloat32);  // not its piece
  std::vector<Tensor> destinations;
  for (const Tensor& local : (*PieceLocals(full, tensors[0], false))[me]) {
    destinations.push_back(*Tensor::Zeros(local.shape(), local.dtype()));
  }
  internal::TransferLocals source_locals, destination_locals;
  source_locals.Add(sources);
  destination_locals.Add(destinations);
  source_locals.checked = destination_locals.checked = true;
  const std::chrono::milliseconds timeout = g_world->timeout();
  g_world->set_timeout(std::chrono::seconds(30));
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<internal::TransferProgram> program = internal::CompileTransfer(
      *plan, *schedule, *exchanges, *g_world, source_locals, destination_locals);
  ASSERT_TRUE(program.ok()) << program.status();
  const absl::Status ran = internal::RunTransfer(*program, *plan, *schedule, g_world,
                                                 source_locals, destination_locals);
  const absl::Status closed = internal::CloseTransfer(*g_world, "reshard", ran, nullptr);
  const auto took = std::chrono::steady_clock::now() - start;
  g_world->set_timeout(timeout);
  EXPECT_EQ(closed.code(), absl::StatusCode::kInvalidArgument) << "rank " << me << ": " << closed;
  EXPECT_THAT(std::string(closed.message()), ::testing::HasSubstr("'w'"));
  EXPECT_LT(took, std::chrono::seconds(10)) << "every rank ends at once, not at the deadline";
}

}  // namespace
}  // namespace sdrt::test

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}

