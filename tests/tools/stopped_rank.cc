// A wedged peer for the timeout tests of the `sdrt` commands (tests/tools/timeout_cli_test.cc):
// started by mpiexec as one rank of an `sdrt` job (MPMD, `mpiexec -n 1 stopped_rank : -n 2
// sdrt ...`), it joins the MPI world exactly as sdrt does (MpiCommunicator::World) and then
// stops itself with SIGSTOP, as a rank under a debugger or stuck in a driver would: alive,
// holding its connections, answering nothing. mpiexec kills it when the job is aborted.
#include <csignal>
#include <cstdio>

#include "sdrt/comm/mpi_communicator.h"

int main() {
  absl::StatusOr<std::unique_ptr<sdrt::MpiCommunicator>> world = sdrt::MpiCommunicator::World();
  if (!world.ok()) {
    std::fprintf(stderr, "stopped_rank: %s\n", world.status().ToString().c_str());
    return 1;
  }
  std::raise(SIGSTOP);
  return 0;
}
