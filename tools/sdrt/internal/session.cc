#include "sdrt/tools/sdrt/internal/session.h"

#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"
#if SDRT_CLI_HAVE_MPI
#include "sdrt/comm/mpi_communicator.h"
#else
#include "sdrt/comm/self_communicator.h"
#endif
#if SDRT_CLI_HAVE_NCCL
#include "sdrt/comm/nccl_communicator.h"
#endif

namespace sdrt::cli {
namespace {

#if SDRT_CLI_HAVE_NCCL
// The GPU of this process for --device cuda: its node-local rank `local_rank`, one GPU per
// rank of the node, so that no two ranks of a node share a GPU (NCCL refuses that) however
// the launcher places ranks on nodes. FailedPrecondition when no GPU is visible or the
// node runs more ranks (`local_size`) than it has visible GPUs, naming both numbers; the
// verdict is agreed over `world` (AgreeAcrossRanks), so that every rank fails alike
// instead of some waiting for the others in NCCL's init. On success the GPU is made this
// process's current device before anything else uses CUDA, so that no rank opens a
// context on another rank's GPU (GPU 0 above all).
absl::StatusOr<int> ChooseGpu(Communicator& world, int local_rank, int local_size) {
  const int count = CudaDeviceCount();
  absl::Status mine;
  if (count <= 0) {
    mine = absl::FailedPreconditionError(
        absl::StrCat("--device cuda: no CUDA device is visible (", CudaAvailable().message(), ")"));
  } else if (local_size > count) {
    mine = absl::FailedPreconditionError(
        absl::StrCat("--device cuda: ", local_size, " ranks run on this node but only ", count,
                     " CUDA devices are visible; each rank needs its own GPU, so start at most ",
                     count, " ranks per node"));
  } else {
    mine = SetCurrentCudaDevice(local_rank);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(world, "", "", {}, mine));
  return local_rank;
}
#endif

}  // namespace

absl::StatusOr<Session> StartSession(bool cuda, std::chrono::milliseconds timeout) {
#if SDRT_CLI_HAVE_MPI
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi_world,
                        MpiCommunicator::World(timeout));
  int local_rank = 0;
  int local_size = 1;
  if (cuda) {
    SDRT_ASSIGN_OR_RETURN(const std::unique_ptr<MpiCommunicator> node, mpi_world->SplitShared());
    local_rank = node->rank();
    local_size = node->size();
  }
  std::unique_ptr<Communicator> world = std::move(mpi_world);
#else
  // Without MPI a session is one process, rank 0 of 1, its own world.
  std::unique_ptr<Communicator> world = std::make_unique<SelfCommunicator>();
  world->set_timeout(timeout);
  const int local_rank = 0;
  const int local_size = 1;
#endif
  std::unique_ptr<Communicator> nccl;
  Device data_device = Device::CPU();
  if (cuda) {
#if SDRT_CLI_HAVE_NCCL
    SDRT_ASSIGN_OR_RETURN(const int gpu, ChooseGpu(*world, local_rank, local_size));
    NcclCommunicator::Options options;
    options.timeout = timeout;
    SDRT_ASSIGN_OR_RETURN(nccl, NcclCommunicator::CreateFromCommunicator(*world, gpu, options));
    data_device = Device::CUDA(gpu);
#else
    (void)local_rank;
    (void)local_size;
    return absl::FailedPreconditionError("--device cuda: sdrt was built without NCCL");
#endif
  }
  SDRT_ASSIGN_OR_RETURN(ProcessGroup group,
                        ProcessGroup::Create(std::move(world), std::move(nccl)));
  Session session{std::move(group), data_device};
  SDRT_ASSIGN_OR_RETURN(session.data_comm, session.group.For(data_device));
  return session;
}

int64_t PeakRssBytes() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

}  // namespace sdrt::cli
