// The main() of a GoogleTest binary run under mpiexec: initialises MPI through
// MpiCommunicator::World(), lets rank 0 print as usual and the other ranks print only
// their failures (prefixed with the rank), and finalises after the tests.
#ifndef SDRT_TESTS_SUPPORT_MPI_TEST_MAIN_H_
#define SDRT_TESTS_SUPPORT_MPI_TEST_MAIN_H_

#include <stdlib.h>

#include <cstdio>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "sdrt/comm/mpi_communicator.h"

namespace sdrt::test {

// Prints only failed assertions, prefixed with the rank (for ranks other than 0).
class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

// A fresh folder made by rank 0 under $TMPDIR (else /tmp), named `prefix` and six random
// characters, the same path on every rank of `comm` ("" when it cannot be made).
inline std::string SharedTempDir(Communicator& comm, const std::string& prefix) {
  std::string dir;
  if (comm.rank() == 0) {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "XXXXXX";
    const char* made = mkdtemp(pattern.data());
    dir = made != nullptr ? made : "";
  }
  EXPECT_TRUE(comm.BroadcastBytes(&dir, 0).ok());
  return dir;
}

// Runs every test with *world set to the world communicator for their duration.
inline int RunMpiTests(int argc, char** argv, MpiCommunicator** world) {
  ::testing::InitGoogleTest(&argc, argv);
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> made = MpiCommunicator::World();
  if (!made.ok()) {
    std::fprintf(stderr, "MpiCommunicator::World: %s\n", made.status().ToString().c_str());
    return 1;
  }
  *world = made->get();
  if ((*made)->rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter((*made)->rank()));
  }
  const int result = RUN_ALL_TESTS();
  *world = nullptr;
  made->reset();
  return result;
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_SUPPORT_MPI_TEST_MAIN_H_
