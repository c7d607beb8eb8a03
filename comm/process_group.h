// ProcessGroup: one group of ranks with a communicator per backend, the backend chosen by
// the device of the tensors, as a torch.distributed process group holding both "gloo"
// (CPU) and "nccl" (CUDA) backends does.
//
// Metadata (the *Bytes calls, barriers) goes through the CPU communicator when there is
// one, else through the CUDA one (NCCL stages host bytes through the GPU).
#ifndef SDRT_COMM_PROCESS_GROUP_H_
#define SDRT_COMM_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/tensor/device.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class ProcessGroup {
 public:
  // Takes ownership of either or both communicators. They must span the same ranks in the
  // same order (equal rank() and size(); checked here) and `cpu` must be a CPU backend,
  // `cuda` a CUDA one. InvalidArgument naming both otherwise, or when both are null.
  static absl::StatusOr<ProcessGroup> Create(std::unique_ptr<Communicator> cpu,
                                             std::unique_ptr<Communicator> cuda);

  int rank() const { return metadata().rank(); }
  int size() const { return metadata().size(); }

  // The communicator for tensors on `device`: the CPU one for CPU tensors (or the CUDA
  // one when it stages CPU tensors and no CPU one exists), the CUDA one for CUDA tensors.
  // FailedPrecondition naming the device when this group has no backend for it (e.g. a
  // CUDA tensor in a group built without NCCL).
  absl::StatusOr<Communicator*> For(Device device) const;
  // The communicator for metadata (bytes) and barriers.
  Communicator& metadata() const { return cpu_ != nullptr ? *cpu_ : *cuda_; }

 private:
  ProcessGroup(std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> cuda)
      : cpu_(std::move(cpu)), cuda_(std::move(cuda)) {}

  std::unique_ptr<Communicator> cpu_;
  std::unique_ptr<Communicator> cuda_;
};

}  // namespace sdrt

#endif  // SDRT_COMM_PROCESS_GROUP_H_
