// Deadlines of the MPI backend (Communicator "Deadlines", docs/SEMANTICS.md 11.16): a rank
// that never joins a collective makes every live rank return DeadlineExceeded naming the
// op and the absent rank within the timeout plus the roll call's grace, instead of
// waiting forever. CTest runs this binary under `mpiexec -n 2` and `-n 3`.
//
// Rank 1 plays the stopped peer: it skips the collective and waits on the world instead,
// where its roll-call communicator is not polled, so it answers no roll call, exactly as
// a process under SIGSTOP. When the others are done it joins the abandoned collective
// late, so that no request is left incomplete at MPI_Finalize; the buffers of abandoned
// collectives are kept for the life of the process (Communicator's "Deadlines").
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/tests/support/mpi_test_main.h"

namespace sdrt {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

MpiCommunicator* g_world = nullptr;
constexpr int kAbsent = 1;

// Tensors an abandoned collective may still write: never freed.
std::vector<Tensor>& Kept() {
  static auto* kept = new std::vector<Tensor>();
  return *kept;
}

std::unique_ptr<Communicator> Duplicate(milliseconds timeout) {
  absl::StatusOr<std::unique_ptr<Communicator>> split = g_world->Split(0, g_world->rank());
  EXPECT_TRUE(split.ok()) << split.status();
  (*split)->set_timeout(timeout);
  return *std::move(split);
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(MpiDeadline, DefaultIsTenMinutesAndSplitInheritsTheTimeout) {
  EXPECT_EQ(g_world->timeout(), std::chrono::minutes(10));
  std::unique_ptr<Communicator> parent = Duplicate(milliseconds(1234));
  absl::StatusOr<std::unique_ptr<Communicator>> child = parent->Split(0, parent->rank());
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ((*child)->timeout(), milliseconds(1234));
  ASSERT_TRUE((*child)->Barrier().ok());
}

TEST(MpiDeadline, AbsentRankIsNamedOnEveryLiveRank) {
  std::unique_ptr<Communicator> comm = Duplicate(milliseconds(500));
  const int n = comm->size();
  Tensor input = *Tensor::Empty({4}, DType::kFloat32);
  Tensor output = *Tensor::Empty({4 * n}, DType::kFloat32);
  Kept().push_back(input);
  Kept().push_back(output);
  if (comm->rank() != kAbsent) {
    const Clock::time_point start = Clock::now();
    const absl::Status status = comm->AllGather(output, input);
    const double seconds = SecondsSince(start);
    // EXPECT, not ASSERT, up to the world barrier: a rank that left early would hang it.
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("all_gather (mpi, rank "));
    EXPECT_THAT(status.message(), HasSubstr("rank 1 did not arrive"));
    if (n == 3) {
      EXPECT_THAT(status.message(), HasSubstr("ranks 0, 2 waited in collective #"));
    }
    // The timeout, then at most the grace of the roll call (0.2 s here), with slack for a
    // loaded machine.
    EXPECT_GE(seconds, 0.45);
    EXPECT_LT(seconds, 0.5 + 0.2 + 3.0);
    // The communicator stays unusable, and says why.
    const absl::Status after = comm->Barrier();
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_THAT(after.message(), HasSubstr("earlier timeout"));
    EXPECT_THAT(after.message(), HasSubstr("rank 1 did not arrive"));
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  // Rank 1 arrives late: it hears that the others gave up (or, if MPI completes the
  // abandoned collective first, returns OK); either way no request is left behind.
  if (comm->rank() == kAbsent) {
    const absl::Status late = comm->AllGather(output, input);
    if (!late.ok()) {
      EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
      EXPECT_THAT(late.message(), HasSubstr("gave up waiting after its timeout"));
    }
  }
  ASSERT_TRUE(g_world->Barrier().ok());
}

// A rank with a long timeout does not wait it out once a peer has given up: it hears the
// peer's roll call and gives up too, naming the same absent rank.
TEST(MpiDeadline, ALiveRankGivesUpWhenAPeerDoes) {
  if (g_world->size() < 3) GTEST_SKIP() << "needs a third rank";
  std::unique_ptr<Communicator> comm = Duplicate(milliseconds(60'000));
  if (comm->rank() == 0) comm->set_timeout(milliseconds(300));
  const std::string mine = absl::StrCat("from rank ", comm->rank());
  if (comm->rank() != kAbsent) {
    const Clock::time_point start = Clock::now();
    const absl::Status status = comm->AllGatherBytes(mine).status();
    const double seconds = SecondsSince(start);
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_THAT(status.message(), HasSubstr("all_gather_bytes (mpi, rank "));
    EXPECT_THAT(status.message(), HasSubstr("rank 1 did not arrive"));
    if (comm->rank() == 2) {
      EXPECT_THAT(status.message(), HasSubstr("rank 0 gave up waiting after its timeout"));
    }
    EXPECT_LT(seconds, 0.3 + 0.2 + 3.0);
  }
  ASSERT_TRUE(g_world->Barrier().ok());
  if (comm->rank() == kAbsent) (void)comm->AllGatherBytes(mine);
  ASSERT_TRUE(g_world->Barrier().ok());
}

}  // namespace
}  // namespace sdrt

int main(int argc, char** argv) { return sdrt::test::RunMpiTests(argc, argv, &sdrt::g_world); }
