// case-058 (a stalled peer): three ranks run BroadcastStateDict of a checkpoint in six
// buckets, and rank 1 stops answering after the first bucket, as a rank under SIGSTOP or in
// a wedged driver would. Ranks 0 and 2 must return DeadlineExceeded within the timeout
// (plus the roll call's grace), naming the bucket each waited in, the op and the rank that
// did not arrive;
// nothing hangs. CTest runs it under `mpiexec -n 2` and `-n 3`.
//
// Rank 1 plays the stalled peer through StallingCommunicator: its second data collective
// does not reach MPI; it waits on the world instead (where its roll-call communicator is
// not polled, so it answers no roll call), then joins the abandoned broadcast late, so that
// no request is left incomplete at MPI_Finalize (docs/SEMANTICS.md 11.16).
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
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

// Passes every call to `inner`, except that on the stalled rank data collective number 2
// (the second bucket) waits for the world barrier first, then joins late and fails.
class StallingCommunicator final : public Communicator {
 public:
  explicit StallingCommunicator(std::unique_ptr<Communicator> inner)
      : Communicator(inner->rank(), inner->size()), inner_(std::move(inner)) {}
  absl::string_view backend() const override { return inner_->backend(); }
  Device device() const override { return inner_->device(); }

 protected:
  absl::Status DoBroadcast(absl::Span<const Tensor> tensors, int root) override {
    std::vector<Tensor> copies(tensors.begin(), tensors.end());  // views of the same bytes
    if (++data_calls_ != 2 || rank() != kStalled) {
      return inner_->Broadcast(absl::MakeSpan(copies), root);
    }
    if (absl::Status met = g_world->Barrier(); !met.ok()) return met;  // the others gave up
    (void)inner_->Broadcast(absl::MakeSpan(copies), root);  // late: OK or the others' timeout
    return absl::UnavailableError("rank 1 stalled on purpose");
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
  absl::Status DoAllReduce(Tensor&, ReduceOp) override { return NotUsed(); }
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int, int) override { return NotUsed(); }

 private:
  static absl::Status NotUsed() {
    return absl::InternalError("StallingCommunicator: not a call of BroadcastStateDict");
  }
  std::unique_ptr<Communicator> inner_;
  int data_calls_ = 0;
};

TEST(StalledPeer, Case058EveryLiveRankNamesTheBucketAndTheStalledRank) {
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
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
    // The bucket this rank waited in: the second, or the third where this rank got the
    // second from the root before the stall (a tree broadcast need not pass through rank 1).
    EXPECT_THAT(std::string(result.status().message()),
                ContainsRegex(absl::StrCat("^bucket [23] of ", kTensors)));
    EXPECT_THAT(result.status().message(), HasSubstr("broadcast (mpi, rank "));
    EXPECT_THAT(result.status().message(), HasSubstr("rank 1 did not arrive"));
    // The timeout, then at most the roll call's grace, with slack for a loaded machine.
    EXPECT_LT(seconds, 0.5 + 0.2 + 3.0) << result.status();
    ASSERT_TRUE(g_world->Barrier().ok());  // lets rank 1 join the abandoned broadcast
  }
  ASSERT_TRUE(g_world->Barrier().ok());
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) {
  return sdrt::test::RunMpiTests(argc, argv, &sdrt::test::g_world);
}
