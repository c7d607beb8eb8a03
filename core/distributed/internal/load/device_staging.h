// The device half of LoadStateDict's staging (core/distributed/load_state_dict.h) when
// local tensors are on a CUDA device: pinned staging buffers (cudaHostAlloc) taken from a
// process-wide pool (PinnedStagingBuffers: a second call into the device reuses the first
// one's), one stream for every host-to-device copy, which first waits for the work the
// caller enqueued on the device's legacy default stream before the call, and per buffer an
// event recorded after its copies were enqueued, which the reading thread waits on before
// it reads into that buffer again. So while buffer A's bytes move to the device
// (device_copies.h: cudaMemcpyAsync, cudaMemcpy2DAsync for a Shard(1) piece's rows), the
// next read fills buffer B: double buffering, and the device path never reads through a
// file mapping. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/load/buffer_cache.h"
#include "sdrt/core/distributed/internal/load/device_copies.h"
#include "sdrt/core/distributed/internal/load/read_dests.h"
#include "sdrt/core/distributed/internal/load/read_plan.h"
#include "sdrt/core/distributed/internal/load/staged_reader.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// The pinned bytes PinnedStagingBuffers keeps between calls: room for the default staging
// (LoadOptions: 2 x 256 MiB) and a third buffer (readers = 2), and a cap on the page-locked
// memory a load leaves behind.
inline constexpr int64_t kKeptPinnedStagingBytes = int64_t{1} << 30;

// The process's pool of pinned staging buffers (PinnedHostAllocator, keyed by CUDA device,
// at most kKeptPinnedStagingBytes kept). Never destroyed: the buffers it keeps at exit are
// the process's to lose, never freed after the CUDA runtime is torn down.
BufferCache& PinnedStagingBuffers();

class DeviceStaging {
 public:
  // A stream and `buffers` completion events on CUDA device `device`; the stream waits
  // (cudaStreamWaitEvent) for an event recorded now on the device's legacy default stream,
  // so that the caller's work enqueued there before the call (and on the blocking streams
  // that stream waits for) runs before the load's copies. Unavailable without CUDA; CUDA's
  // error otherwise. Never moved (the pool's hooks point at it).
  static absl::StatusOr<std::unique_ptr<DeviceStaging>> Create(int device, int buffers);

  // Points `pool`'s hooks at this object: pinned buffers from PinnedStagingBuffers
  // (ResourceExhausted naming the size, the device and CUDA's error when cudaHostAlloc
  // fails; never a pageable buffer instead), the wait before a refill (which first enqueues
  // the buffer's planned copies) and the drain (every planned copy enqueued, then the
  // stream's completion). The object must stay alive until RunStagedReads returns.
  void Attach(StagingPool& pool);

  // The staged reader's consumer for a read in buffer `index` (its bytes at [base, base +
  // read.bytes) of `buffer`), on the calling thread: the segments device_copies.h takes
  // are planned into the buffer's copies, joined with those of the buffer's earlier reads,
  // and enqueued when the next read is in another buffer, before the buffer is refilled,
  // or at the drain; the others go now (CopySegment, on the stream). An event recorded
  // after a buffer's copies is what its refill waits for.
  absl::Status CopyOut(const ReadPlan& plan, const std::vector<ReadDest>& dests,
                       const Read& read, const Tensor& buffer, int64_t base, size_t index);

  // After RunStagedReads returned (its drain ran): gives the buffers taken back to
  // PinnedStagingBuffers when the stream has completed without error and nothing else
  // holds them; else they are freed with this object.
  void ReturnBuffers();

 private:
  static constexpr size_t kNoBuffer = static_cast<size_t>(-1);

  // What is pending on one staging buffer.
  struct Buffer {
    CudaEvent done;                   // recorded after the buffer's copies were enqueued
    std::vector<DeviceCopy> planned;  // not yet enqueued
    bool unrecorded = false;  // copies planned or enqueued since `done` was last recorded
    bool recorded = false;    // `done` recorded at least once: a refill waits for it
  };

  DeviceStaging(int device, CudaStream stream, DeviceBackend* backend)
      : device_(device), stream_(std::move(stream)), backend_(backend) {}

  // Enqueues buffer `index`'s planned copies and records its event after them. mu_ held.
  absl::Status FlushLocked(size_t index);

  const int device_;
  const CudaStream stream_;
  DeviceBackend* const backend_;  // CUDA's (tensor/backend/device_backend.h)
  // Guards buffers_ and current_: the consumer plans and flushes on the calling thread,
  // a reader thread flushes the buffer it is about to refill (before_refill).
  std::mutex mu_;
  std::vector<Buffer> buffers_;
  size_t current_ = kNoBuffer;  // the buffer of the consumer's last read
  std::vector<size_t> others_;  // CopyOut's scratch (calling thread)
  // The pinned buffers Attach's allocator took (on the calling thread), for ReturnBuffers.
  std::vector<std::shared_ptr<Storage>> taken_;
};

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_DEVICE_STAGING_H_
