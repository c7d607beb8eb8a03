// DeviceStaging (device_staging.h).
#include "sdrt/core/distributed/internal/load/device_staging.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

absl::StatusOr<DeviceStaging> DeviceStaging::Create(int device, int buffers) {
  SDRT_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device));
  std::vector<CudaEvent> events;
  for (int i = 0; i < buffers; ++i) {
    SDRT_ASSIGN_OR_RETURN(CudaEvent event, CudaEvent::Create(device, EventTiming::kDisabled));
    events.push_back(std::move(event));
  }
  DeviceStaging staging(device, std::move(stream), std::move(events));
  staging.recorded_.assign(static_cast<size_t>(buffers), 0);
  return staging;
}

void DeviceStaging::Attach(StagingPool& pool) {
  pool.allocate = [this](int64_t nbytes) -> absl::StatusOr<Tensor> {
    absl::StatusOr<std::shared_ptr<Storage>> storage =
        PinnedHostAllocator::Allocate(nbytes, device_);
    if (!storage.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("pinned staging buffer of ", nbytes,
                                                       " bytes for cuda:", device_, ": ",
                                                       storage.status().message()));
    }
    return Tensor::FromStorage(*std::move(storage), DType::kUInt8, {nbytes});
  };
  pool.before_refill = [this](size_t index) -> absl::Status {
    if (index >= events_.size() || recorded_[index] == 0) return absl::OkStatus();
    return events_[index].Synchronize();
  };
  pool.drain = [this] { return stream_.Synchronize(); };
}

absl::Status DeviceStaging::RecordUse(size_t index) {
  if (index >= events_.size()) {
    return absl::InternalError(absl::StrCat("staging buffer ", index, " of ", events_.size()));
  }
  SDRT_RETURN_IF_ERROR(events_[index].Record(stream_.handle()));
  recorded_[index] = 1;
  return absl::OkStatus();
}

}  // namespace sdrt::internal
