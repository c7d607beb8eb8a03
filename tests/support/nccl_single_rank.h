// A one-rank NCCL communicator on GPU 0 for the GPU tests of the NCCL paths (built only
// with NCCL; the tests that call it skip first without a device). Header-only; test code
// only.
#ifndef SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_
#define SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "sdrt/comm/nccl_communicator.h"

namespace sdrt::test {

// A communicator of one rank on device 0 from a locally made unique id, or nullptr after
// recording a test failure with NCCL's error.
inline std::unique_ptr<NcclCommunicator> SingleRankNccl() {
  absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
  EXPECT_TRUE(id.ok()) << id.status();
  if (!id.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(0, 1, 0, *id);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? *std::move(comm) : nullptr;
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_NCCL_SINGLE_RANK_H_
