#include "sdrt/tools/sdrt/internal/session.h"

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/output.h"
#if SDRT_CLI_HAVE_MPI
#include "sdrt/comm/mpi_communicator.h"
#endif
#if SDRT_CLI_HAVE_NCCL
#include "sdrt/comm/nccl_communicator.h"
#endif

namespace sdrt::cli {

absl::StatusOr<Session> StartSession(const std::string& device) {
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or cuda, got \"", device, "\""));
  }
#if SDRT_CLI_HAVE_MPI
  // More ranks on this machine than cores (MPICH's mpiexec says how many in PMI_SIZE):
  // MPICH's ring all-gather then waits for the scheduler at every step (25 s instead of
  // 0.5 s for MiniLM on 4 ranks over 2 cores, measured); Bruck's algorithm has log2(ranks)
  // steps. Set before MPI starts; the user's own setting wins.
  const char* pmi_size = std::getenv("PMI_SIZE");
  if (pmi_size != nullptr &&
      std::atol(pmi_size) > static_cast<long>(std::thread::hardware_concurrency())) {
    setenv("MPIR_CVAR_ALLGATHERV_INTRA_ALGORITHM", "brucks", /*overwrite=*/0);
    setenv("MPIR_CVAR_ALLGATHER_INTRA_ALGORITHM", "brucks", /*overwrite=*/0);
  }
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> world, MpiCommunicator::World());
  std::unique_ptr<Communicator> nccl;
  Device data_device = Device::CPU();
  if (device == "cuda") {
#if SDRT_CLI_HAVE_NCCL
    const int count = CudaDeviceCount();
    if (count <= 0) {
      return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
    }
    const int gpu = world->rank() % count;
    SDRT_ASSIGN_OR_RETURN(nccl, NcclCommunicator::CreateFromCommunicator(*world, gpu));
    data_device = Device::CUDA(gpu);
#else
    return absl::FailedPreconditionError("--device cuda: sdrt was built without NCCL");
#endif
  }
  SDRT_ASSIGN_OR_RETURN(ProcessGroup group,
                        ProcessGroup::Create(std::move(world), std::move(nccl)));
  Session session{std::move(group), data_device};
  SDRT_ASSIGN_OR_RETURN(session.data_comm, session.group.For(data_device));
  return session;
#else
  return absl::FailedPreconditionError(
      "this command runs under mpiexec and sdrt was built without MPI");
#endif
}

int64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

absl::StatusOr<std::vector<int64_t>> AllPeakRssBytes(Communicator& comm) {
  const int64_t mine = PeakRssBytes();
  absl::StatusOr<std::vector<std::string>> all =
      comm.AllGatherBytes(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)));
  if (!all.ok()) return all.status();
  std::vector<int64_t> out;
  for (const std::string& s : *all) {
    int64_t v = 0;
    std::memcpy(&v, s.data(), sizeof(v));
    out.push_back(v);
  }
  return out;
}

}  // namespace sdrt::cli
