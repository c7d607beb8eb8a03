// A stalled or stopped peer. case-058: three ranks run BroadcastStateDict of a checkpoint of
// six tensors in buckets of one tensor, and rank 1 stops answering after its first exchange,
// as a rank under SIGSTOP or in a wedged driver would. Ranks 0 and 2 must return
// DeadlineExceeded within the timeout (plus the roll call's grace), naming the rank that did
// not arrive; nothing hangs. And a weight sync whose rank 0 stops calling (StoppedPeer
// below). CTest runs it under `mpiexec -n 2` and `-n 3`.
//
// Rank 1 plays the stalled peer through StallingCommunicator: its second exchange does not
// reach MPI; it waits on the world instead (where its roll-call communicator is not polled,
// so it answers no roll call), then joins the abandoned exchange late, so that as few
// requests as may be are left incomplete at MPI_Finalize (docs/SEMANTICS.md 11.16).
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tests/core/distributed/distributed_state_dict_test_util.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::g_world;

constexpr int kStalled = 1;
constexpr int kTensors = 6;
constexpr int64_t kRows = 96;  // of 256 float32: 96 KiB a tensor, one bucket each
constexpr int64_t kBucketBytes = kRows * 256 * 4;
constexpr milliseconds kTimeout(500);
constexpr milliseconds kSyncTimeout(1000);

// Passes every call to `inner`, except that on the stalled rank exchange number 2 waits for
// the world barrier first, then joins late and fails.
class StallingCommunicator final : public Communicator {
 public:
  explicit StallingCommunicator(std::unique_ptr<Communicator> inner)
      : Communicator(inner->rank(), inner->size()), inner_(std::move(inner)) {
    set_timeout(inner_->timeout());
  }
  absl::string_view backend() const override { return inner_->backend(); }
  Device device() const override { return inner_->device(); }
  bool SupportsExchange() const override { return true; }

 protected:
  absl::Status DoExchange(absl::Span<const SendMessage> sends,
                          absl::Span<const ReceiveMessage> receives,
                          const LocalWork& overlap) override {
    if (++exchanges_ != 2 || rank() != kStalled) return inner_->Exchange(sends, receives, overlap);
    if (absl::Status met = g_world->Barrier(); !met.ok()) return met;  // the others gave up
    (void)inner_->Exchange(sends, receives, overlap);  // late: OK or the others' timeout
    return absl::UnavailableError("rank 1 stalled on purpose");
  }
  absl::Status DoBroadcast(absl::Span<const Tensor> tensors, int root) override {
    std::vector<Tensor> copies(tensors.begin(), tensors.end());  // views of the same bytes
    return inner_->Broadcast(absl::MakeSpan(copies), root);
  }
  absl::Status DoAllReduce(Tensor& tensor, ReduceOp op) override {
    return inner_->AllReduce(tensor, op);
  }
  absl::Status DoBroadcastBytes(std::string* bytes, int root) override {
    return inner_->BroadcastBytes(bytes, root);
  }
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override {
    return inner_->AllGatherBytes(mine);
  }
  absl::Status DoBarrier() override { return inner_->Barrier(); }
  // What BroadcastStateDict does not call.
  absl::Status DoAllGather(void*, const void*, int64_t) override { return NotUsed(); }
  absl::Status DoAllGatherV(void*, const void*, absl::Span<const int64_t>) override {
    return NotUsed();
  }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return NotUsed(); }

 private:
  static absl::Status NotUsed() {
    return absl::InternalError("StallingCommunicator: not a call of BroadcastStateDict");
  }
  std::unique_ptr<Communicator> inner_;
  int exchanges_ = 0;
};

TEST(StalledPeer, Case058EveryLiveRankNamesTheStalledRank) {
  if (g_world->size() < 2) GTEST_SKIP() << "needs a second rank";
  absl::StatusOr<std::unique_ptr<Communicator>> dup = g_world->Split(0, g_world->rank());
  ASSERT_TRUE(dup.ok()) << dup.status();
  (*dup)->set_timeout(kTimeout);
  StallingCommunicator comm(*std::move(dup));

  const std::shared_ptr<const DeviceMesh> mesh = test::Mesh({g_world->size()});
  std::vector<test::Spec> specs;
  for (int i = 0; i < kTensors; ++i) {
    specs.push_back(test::DSpec(absl::StrCat("layers.", i, ".weight"), {kRows, 256},
                                DType::kFloat32, mesh, "S(0)"));
  }
  Map full;
  Map local;
  for (const test::Spec& s : specs) {
    if (g_world->rank() == 0) full.Set(s.path, test::FullLeaf(s));
    local.Set(s.path, test::MetaLeaf(s));
  }
  BroadcastOptions options;
  options.comm = &comm;
  options.bucket_bytes = kBucketBytes;
  const Clock::time_point start = Clock::now();
  const absl::StatusOr<BroadcastResult> result = BroadcastStateDict(full, local, options);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  if (g_world->rank() == kStalled) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  } else {
    // EXPECT, not ASSERT, before the world barrier: a rank that left early would hang it.
    // The root waited in an exchange with rank 1; a rank that receives only from the root
    // waited in its next exchange, or in the closing of the call.
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("rank 1 did not arrive"));
    if (g_world->rank() == 0) {
      EXPECT_THAT(std::string(result.status().message()),
                  ContainsRegex("^exchange [0-9]+ of [0-9]+ \\(point to point\\): exchange "
                                "\\(mpi, rank 0"));
    }
    // The timeout, then at most the roll call's grace, with slack for a loaded machine.
    EXPECT_LT(seconds, 0.5 + 0.2 + 3.0) << result.status();
    ASSERT_TRUE(g_world->Barrier().ok());  // lets rank 1 join the abandoned exchange
  }
  ASSERT_TRUE(g_world->Barrier().ok());
}

// A weight sync in which rank 0 stops calling at step 2 (issue 29): the trainer's rows are
// Shard(0) over ranks 0, 1, ..., the engine's over 1, 0, 2, ...: ranks 0 and 1 swap their
// pieces every step and every other rank keeps its own, exchanging nothing. Without the
// closing of every call (internal/engine/transfer.h), rank 1, whose piece to rank 0 is small
// enough to be sent eagerly, and the ranks that exchange nothing would report success for a
// step rank 0 never made; each step must instead fail on every live rank with
// DeadlineExceeded naming rank 0, small pieces (below MPI's eager limit) and large ones
// alike, through a binding (BoundReshard) and through ExecuteReshard.
struct SyncCase {
  int64_t cols;  // float32 columns of a row; the rows of a rank: 4
  bool bound;
};

class StoppedPeer : public ::testing::TestWithParam<SyncCase> {};

TEST_P(StoppedPeer, AStepSucceedsOnEveryRankOrFailsOnEveryRank) {
  if (g_world->size() < 2) GTEST_SKIP() << "needs a second rank";
  const SyncCase c = GetParam();
  absl::StatusOr<std::unique_ptr<Communicator>> dup = g_world->Split(0, g_world->rank());
  ASSERT_TRUE(dup.ok()) << dup.status();
  // A longer deadline than case-058's: four setups, plans and bindings must not miss it on
  // a loaded machine.
  (*dup)->set_timeout(kSyncTimeout);
  // Kept until exit: the late rank's failed step leaves a notice to a rank that already gave
  // up, never received; MPICH reuses a freed communicator's context id, so a communicator
  // freed here could hand that notice to the next case's first collective.
  static std::vector<std::unique_ptr<Communicator>> kept;
  kept.push_back(*std::move(dup));
  Communicator& comm = *kept.back();
  const int n = g_world->size();
  std::vector<int64_t> engine_ranks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) engine_ranks[static_cast<size_t>(r)] = r;
  std::swap(engine_ranks[0], engine_ranks[1]);
  const auto trainer_mesh = test::Mesh({n});
  const auto engine_mesh =
      std::make_shared<const DeviceMesh>(*DeviceMesh::Create({n}, engine_ranks));
  const IntVector shape = {4 * n, c.cols};
  Tensor full = *Tensor::Empty(shape, DType::kFloat32);
  const auto fill = [&](int step) {
    float* v = full.data<float>();
    for (int64_t i = 0; i < full.numel(); ++i) v[i] = static_cast<float>(1000 * step + i);
  };
  fill(1);
  DTensor mine = *DistributeTensor(full, trainer_mesh, {Placement::Shard(0)}, g_world->rank());
  Map source;
  source.Set("w", Value(mine));
  Map destination;
  destination.Set("w", Value(*DTensor::Make(*Tensor::Meta({4, c.cols}, DType::kFloat32),
                                            engine_mesh, {Placement::Shard(0)}, shape)));
  ReshardOptions options;
  options.comm = &comm;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, destination, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::optional<BoundReshard> sync;
  if (c.bound) {
    absl::StatusOr<BoundReshard> bound = BindReshard(*plan, source, destination);
    ASSERT_TRUE(bound.ok()) << bound.status();
    sync.emplace(*std::move(bound));
  }
  const auto step = [&]() -> absl::Status {
    return c.bound ? sync->Execute() : ExecuteReshard(*plan, source, destination);
  };
  // Step 1 lands everywhere.
  ASSERT_TRUE(step().ok());
  const DTensor want = *DistributeTensor(full, engine_mesh, {Placement::Shard(0)}, g_world->rank());
  const Tensor& got = destination.Find("w")->as_dtensor().local();
  ASSERT_EQ(got.nbytes(), want.local().nbytes());
  EXPECT_EQ(std::memcmp(got.data_ptr(), want.local().data_ptr(), static_cast<size_t>(got.nbytes())),
            0);
  // Step 2: the trainer writes new values in place; rank 0 does not call.
  fill(2);
  const Tensor next = DistributeTensor(full, trainer_mesh, {Placement::Shard(0)}, g_world->rank())
                          ->local();
  Tensor trainer_local = mine.local();  // the same bytes, written in place
  ASSERT_TRUE(trainer_local.CopyFrom(next).ok());
  if (g_world->rank() != 0) {
    const Clock::time_point start = Clock::now();
    const absl::Status status = step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // EXPECT, not ASSERT, before the world barrier: a rank that left early would hang it.
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("rank 0 did not arrive")) << status;
    EXPECT_LT(seconds, 1.0 + 0.25 + 3.0) << status;
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  // Rank 0 wakes up late: its step fails too (the others gave up), and it takes its part in
  // what they left behind, so that as few requests as may be are left at MPI_Finalize.
  if (g_world->rank() == 0) {
    EXPECT_FALSE(step().ok());
  }
  ASSERT_TRUE(g_world->Barrier().ok());
}

INSTANTIATE_TEST_SUITE_P(SmallAndLargePieces, StoppedPeer,
                         ::testing::Values(SyncCase{4, true}, SyncCase{4, false},
                                           SyncCase{16384, true}, SyncCase{16384, false}),
                         [](const ::testing::TestParamInfo<SyncCase>& info) {
                           return absl::StrCat(info.param.cols == 4 ? "Small" : "Large",
                                               info.param.bound ? "Bound" : "Executed");
                         });

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
