#include "sdrt/comm/process_group.h"

#include "absl/strings/str_cat.h"

namespace sdrt {

absl::StatusOr<ProcessGroup> ProcessGroup::Create(std::unique_ptr<Communicator> cpu,
                                                  std::unique_ptr<Communicator> cuda) {
  if (cpu == nullptr && cuda == nullptr) {
    return absl::InvalidArgumentError("ProcessGroup: no communicator given");
  }
  if (cpu != nullptr && !cpu->device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat("ProcessGroup: the CPU communicator (",
                                                   cpu->backend(), ") works on ",
                                                   cpu->device().ToString()));
  }
  if (cuda != nullptr && !cuda->device().is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat("ProcessGroup: the CUDA communicator (",
                                                   cuda->backend(), ") works on ",
                                                   cuda->device().ToString()));
  }
  if (cpu != nullptr && cuda != nullptr &&
      (cpu->rank() != cuda->rank() || cpu->size() != cuda->size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ProcessGroup: ", cpu->backend(), " is rank ", cpu->rank(), " of ", cpu->size(), " but ",
        cuda->backend(), " is rank ", cuda->rank(), " of ", cuda->size()));
  }
  return ProcessGroup(std::move(cpu), std::move(cuda));
}

absl::StatusOr<Communicator*> ProcessGroup::For(Device device) const {
  if (device.is_cuda() && cuda_ != nullptr) {
    if (cuda_->device() != device) {
      return absl::FailedPreconditionError(
          absl::StrCat("ProcessGroup: ", device.ToString(), " tensor, but this rank's ",
                       cuda_->backend(), " communicator works on ", cuda_->device().ToString()));
    }
    return cuda_.get();
  }
  if (device.is_cpu()) {
    if (cpu_ != nullptr) return cpu_.get();
    return cuda_.get();  // stages CPU tensors through its device (case-013)
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "ProcessGroup: no communicator for ", device.ToString(), " tensors in this group (",
      cpu_ != nullptr ? cpu_->backend() : cuda_->backend(), " only)"));
}

}  // namespace sdrt
