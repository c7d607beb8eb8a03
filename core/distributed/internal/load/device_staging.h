// The device half of LoadStateDict's staging (core/distributed/load_state_dict.h) when
// local tensors are on a CUDA device: staging buffers allocated pinned (cudaHostAlloc)
// once per call, one stream for every host-to-device copy, and per buffer an event
// recorded after its copies were enqueued, which the reading thread waits on before it
// reads into that buffer again. So while buffer A's bytes move to the device with
// cudaMemcpyAsync (or cudaMemcpy2DAsync for a Shard(1) piece's rows), the next read fills
// buffer B: double buffering, and the device path never reads through a file mapping.
// Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/load/staged_reader.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

class DeviceStaging {
 public:
  // A stream and `buffers` completion events on CUDA device `device`. Unavailable
  // without CUDA; CUDA's error otherwise.
  static absl::StatusOr<DeviceStaging> Create(int device, int buffers);

  // Points `pool`'s hooks at this object: pinned allocation (ResourceExhausted naming the
  // size, the device and CUDA's error when cudaHostAlloc fails; never a pageable buffer
  // instead), the wait before a refill, and the drain (the stream's completion). The
  // object must stay where it is (not moved) and alive until RunStagedReads returns.
  void Attach(StagingPool& pool);

  // The stream the consumer enqueues its copies on.
  StreamHandle stream() const { return stream_.handle(); }

  // Marks buffer `index`'s copies enqueued so far: its next refill waits for them.
  absl::Status RecordUse(size_t index);

 private:
  DeviceStaging(int device, CudaStream stream, std::vector<CudaEvent> events)
      : device_(device), stream_(std::move(stream)), events_(std::move(events)) {}
  int device_;
  CudaStream stream_;
  std::vector<CudaEvent> events_;
  // One byte per buffer (not vector<bool>'s shared words): the reader threads read the
  // entries of the buffers they hold while the consumer sets another's.
  std::vector<char> recorded_;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_
