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
#include "sdrt/core/distributed/internal/node.h"
#include "sdrt/tools/sdrt/internal/gpu_for_rank.h"
#endif

namespace sdrt::cli {
namespace {

#if SDRT_CLI_HAVE_NCCL
// The GPU of this process for --device cuda: GpuForRank of the visible devices and its
// node-local rank `local_rank` of `local_size` (gpu_for_rank.h: the one device a rank sees,
// or the one of its local rank). Its errors (with why CUDA sees no device when none is
// visible) and SetCurrentCudaDevice's are agreed over `world` (AgreeAcrossRanks), so that
// every rank fails alike instead of some waiting for the others in NCCL's init; so are two
// ranks of a host given one GPU (RefuseSharedGpus of every rank's host and PCI bus id). On
// success the GPU is made this process's current device before anything else uses CUDA, so
// that no rank opens a context on another rank's GPU (GPU 0 above all).
absl::StatusOr<int> ChooseGpu(Communicator& world, int local_rank, int local_size) {
  const int count = CudaDeviceCount();
  const absl::StatusOr<int> gpu = GpuForRank(count, local_rank, local_size);
  absl::Status mine = gpu.status();
  if (count == 0) {
    mine = absl::Status(mine.code(),
                        absl::StrCat(mine.message(), " (", CudaAvailable().message(), ")"));
  }
  if (mine.ok()) mine = SetCurrentCudaDevice(*gpu);
  std::string bus;
  if (mine.ok()) {
    absl::StatusOr<std::string> id = CudaPciBusId(*gpu);
    mine = id.status();
    if (id.ok()) bus = *std::move(id);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(world, "", "", {}, mine));
  // Two ranks of a host on one GPU are refused on every rank now, not by NCCL's init on
  // those two while the others wait for them.
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> gpus,
                        world.AllGatherBytes(absl::StrCat(internal::HostName(), " ", bus)));
  SDRT_RETURN_IF_ERROR(RefuseSharedGpus(gpus));
  return *gpu;
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
    // Agreed, so that what one rank's init hit (NCCL refusing two ranks on one GPU, with its
    // hint) is what every rank reports, rank 0 included.
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> made =
        NcclCommunicator::CreateFromCommunicator(*world, gpu, options);
    SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(*world, "", "", {}, made.status()));
    nccl = *std::move(made);
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
