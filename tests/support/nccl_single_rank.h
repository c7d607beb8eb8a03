// A one-rank NCCL communicator on GPU 0 for the GPU tests of the NCCL paths (built only
// with NCCL; the tests that call it skip first without a device). Header-only; test code
// only.
#ifndef SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_
#define SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_

#include <chrono>
#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"

namespace sdrt::test {

// How long a test's one-rank communicator waits for NCCL (creation and each call) before
// it gives up: far above what one rank needs (well under a second), far below Options::timeout's
// default of 10 minutes, so that an NCCL that hangs fails each test within a minute
// instead of running it to ctest's limit.
inline constexpr std::chrono::seconds kSingleRankNcclTimeout(60);

// A communicator of one rank on device 0 from a locally made unique id, every call under
// kSingleRankNcclTimeout, or nullptr after recording a test failure with NCCL's error.
inline std::unique_ptr<NcclCommunicator> SingleRankNccl() {
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return nullptr;
  NcclCommunicator::Options options;
  options.timeout = kSingleRankNcclTimeout;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm =
      NcclCommunicator::Create(0, 1, 0, *id, options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_
