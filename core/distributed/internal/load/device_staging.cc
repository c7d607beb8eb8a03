// DeviceStaging (device_staging.h).
#include "sdrt/core/distributed/internal/load/device_staging.h"

#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

BufferCache& PinnedStagingBuffers() {
  static BufferCache* const buffers = new BufferCache(
      [](int64_t nbytes, int device) { return PinnedHostAllocator::Allocate(nbytes, device); },
      kKeptPinnedStagingBytes);
  return *buffers;
}

absl::StatusOr<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(int device, int buffers) {
  SDRT_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(device));
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(DeviceType::kCUDA));
  // The caller's pending work on the legacy default stream first (ours is non-blocking: it
  // would not wait by itself).
  SDRT_RETURN_IF_ERROR(WaitForLegacyStream(device, stream.handle()));
  std::unique_ptr<DeviceStaging> staging(new DeviceStaging(device, std::move(stream), backend));
  for (int i = 0; i < buffers; ++i) {
    SDRT_ASSIGN_OR_RETURN(CudaEvent done, CudaEvent::Create(device, EventTiming::kDisabled));
    staging->buffers_.push_back(Buffer{std::move(done), {}, false, false});
  }
  return staging;
}

void DeviceStaging::Attach(StagingPool& pool) {
  pool.allocate = [this](int64_t nbytes) -> absl::StatusOr<Tensor> {
    absl::StatusOr<std::shared_ptr<Storage>> storage =
        PinnedStagingBuffers().Take(device_, nbytes);
    if (!storage.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("pinned staging buffer of ", nbytes,
                                                       " bytes for cuda:", device_, ": ",
                                                       storage.status().message()));
    }
    taken_.push_back(*storage);
    // A kept buffer may be larger (BufferCache::Take): the view is the size asked for.
    return Tensor::FromStorage(*std::move(storage), DType::kUInt8, {nbytes});
  };
  pool.before_refill = [this](size_t index) -> absl::Status {
    bool wait = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (index >= buffers_.size()) return absl::OkStatus();
      SDRT_RETURN_IF_ERROR(FlushLocked(index));
      wait = buffers_[index].recorded;
    }
    // Nothing records this event again before the refill: its copies are all enqueued.
    return wait ? buffers_[index].done.Synchronize() : absl::OkStatus();
  };
  pool.drain = [this] {
    absl::Status status = absl::OkStatus();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < buffers_.size(); ++i) status.Update(FlushLocked(i));
    }
    status.Update(stream_.Synchronize());
    return status;
  };
}

absl::Status DeviceStaging::CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests,
                                    const Read& read, const Tensor& buffer, int64_t base,
                                    size_t index) {
  others_.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index >= buffers_.size()) {
      return absl::InternalError(absl::StrCat("staging buffer ", index, " of ", buffers_.size()));
    }
    // The last buffer's copies go now, while this one's are planned.
    if (current_ != index && current_ != kNoBuffer) SDRT_RETURN_IF_ERROR(FlushLocked(current_));
    current_ = index;
    Buffer& b = buffers_[index];
    PlanDeviceCopies(plan, dests, read, buffer.data<uint8_t>() + base, Device::CUDA(device_),
                     b.planned, others_);
    b.unrecorded = true;
  }
  // Enqueued before the buffer's event is recorded: the buffer is refilled (and flushed,
  // before_refill) only after this read's call returned.
  for (const size_t i : others_) {
    SDRT_RETURN_IF_ERROR(CopySegment(plan, dests, read, i, buffer, base, stream_.handle()));
  }
  return absl::OkStatus();
}

absl::Status DeviceStaging::FlushLocked(size_t index) {
  Buffer& b = buffers_[index];
  if (!b.unrecorded) return absl::OkStatus();
  b.unrecorded = false;
  const absl::Status enqueued =
      EnqueueDeviceCopies(b.planned, Device::CUDA(device_), *backend_, stream_.handle());
  b.planned.clear();  // its capacity kept for the buffer's next reads
  SDRT_RETURN_IF_ERROR(enqueued);
  SDRT_RETURN_IF_ERROR(b.done.Record(stream_.handle()));
  b.recorded = true;
  return absl::OkStatus();
}

void DeviceStaging::ReturnBuffers() {
  std::vector<std::shared_ptr<Storage>> taken = std::move(taken_);
  taken_.clear();
  // A failed stream may still hold copies out of the buffers: they are not reused.
  if (!stream_.Synchronize().ok()) return;
  for (std::shared_ptr<Storage>& buffer : taken) {
    if (buffer.use_count() == 1) PinnedStagingBuffers().Give(device_, std::move(buffer));
  }
}

}  // namespace sdrt::internal
