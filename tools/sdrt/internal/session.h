// The communicators of a multi-rank command's run (under mpiexec, or one process without
// MPI), which the runner (runner.h) starts, and this process's peak memory.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_SESSION_H_
#define SDRT_TOOLS_SDRT_INTERNAL_SESSION_H_

#include <chrono>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/process_group.h"
#include "sdrt/tensor/device.h"

namespace sdrt::cli {

// The ranks of a run: a ProcessGroup holding the world (CPU tensors, metadata, barriers:
// the MPI world, or in a build without MPI a SelfCommunicator, one process) and, with
// --device cuda, NCCL over the same ranks, and the device the command's tensors live on.
struct Session {
  ProcessGroup group;
  Device device = Device::CPU();
  Communicator* data_comm = nullptr;  // group.For(device), checked by StartSession

  // Metadata, barriers and agreement: the MPI world.
  Communicator& world() const { return group.metadata(); }
  // The communicator tensor data moves over: NCCL for CUDA, else the MPI world.
  Communicator& data() const { return *data_comm; }
  int rank() const { return world().rank(); }
  int size() const { return world().size(); }
};

// Starts the world: MPI (MpiCommunicator::World) when sdrt is built with it, else one
// process on its own (SelfCommunicator), so that one-rank `sdrt gather` and `sdrt load`
// run without MPI. With `cuda` (--device cuda) each process then takes its GPU (GpuForRank,
// gpu_for_rank.h: the one device it sees, as with one GPU per rank through
// CUDA_VISIBLE_DEVICES, else the one of its node-local rank, MpiCommunicator::SplitShared; 0
// without MPI), makes it its current device (SetCurrentCudaDevice) before anything else uses
// CUDA, and joins NCCL on it (NcclCommunicator::CreateFromCommunicator over the world).
// FailedPrecondition, the same on every rank, when no GPU is visible or a rank sees more than
// one but fewer than its node's ranks (the message names both numbers), and for cuda in a
// build without NCCL; InvalidArgument on every rank when two ranks of a host were given one
// GPU (told apart by host name and PCI bus id before NCCL starts); NCCL's init errors agreed
// across the ranks, so that every rank reports what any rank hit; the backends' errors. Every communicator of the session has `timeout` (--timeout,
// tools/sdrt/internal/deadline.h): DeadlineExceeded when a rank does not arrive within it,
// starting with MPI's world.
absl::StatusOr<Session> StartSession(bool cuda, std::chrono::milliseconds timeout);

// This process's peak resident memory (getrusage ru_maxrss), bytes.
int64_t PeakRssBytes();

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_SESSION_H_
