// N NCCL ranks in one process (test code only, header-only): one thread per GPU, each
// with its own NcclCommunicator made by NcclCommunicator::Create (ncclCommInitRankConfig)
// from one shared unique id, no MPI, as ProcessGroupNCCL's tests and nccl-tests' -t mode
// do. Built only with NCCL; callers skip first when fewer GPUs than ranks are visible.
#ifndef SDRT_TESTS_SUPPORT_NCCL_RANKS_H_
#define SDRT_TESTS_SUPPORT_NCCL_RANKS_H_

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tests/support/test_util.h"

namespace sdrt::test {

// How long a multi-rank test's collectives may take: a rank whose thread failed early
// (an ASSERT) leaves the others waiting in a collective, and they fail after this instead
// of hanging the test.
inline constexpr std::chrono::seconds kNcclRanksTimeout{60};

// Runs `body(rank, comm)` on `ranks` threads, rank r on GPU r with the current device set
// to it first (as an engine binds each worker to its GPU), and joins them. A thread whose
// setup fails records the failure and returns (the others then fail by timeout).
// `options` is every communicator's (its timeout: kNcclRanksTimeout unless given).
inline void RunNcclRanks(int ranks, const std::function<void(int, NcclCommunicator&)>& body,
                         NcclCommunicator::Options options = {nullptr, kNcclRanksTimeout}) {
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      const absl::Status bound = SetCurrentCudaDevice(rank);
      ASSERT_TRUE(bound.ok()) << "rank " << rank << ": " << bound;
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
          NcclCommunicator::Create(rank, ranks, rank, *id, options);
      ASSERT_TRUE(comm.ok()) << "rank " << rank << ": " << comm.status();
      body(rank, **comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace sdrt::test

// In a test body: skips unless at least two GPUs are visible, else declares `ranks`, the
// number of ranks to run (one per GPU, at most 8).
#define SDRT_RANKS_OR_SKIP(ranks)                   \
  SDRT_SKIP_WITHOUT_GPU();                          \
  const int ranks = std::min(CudaDeviceCount(), 8); \
  if (ranks < 2)                                    \
  GTEST_SKIP() << "needs 2 or more GPUs for NCCL across ranks; " << ranks << " visible"

#endif  // SDRT_TESTS_SUPPORT_NCCL_RANKS_H_
