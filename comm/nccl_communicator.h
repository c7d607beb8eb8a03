// NcclCommunicator: the NCCL backend of Communicator, for CUDA tensors on one device
// (PyTorch's ProcessGroupNCCL). One process per GPU; the ranks meet through an
// NcclUniqueId that rank 0 makes and every rank receives: over a bootstrap Communicator
// (CreateFromCommunicator, e.g. an MpiCommunicator), from the embedding program's own
// launcher, or made locally for a single rank, so a build without MPI still runs NCCL.
//
// Data moves as bytes (ncclUint8); only all-reduce uses typed NCCL datatypes (float16 and
// bfloat16 are native in NCCL). NCCL has no 16-bit integer type, so an int16 all-reduce
// is InvalidArgument here (as in ProcessGroupNCCL); the MPI backend reduces int16. CPU tensors are
// accepted too and staged through the GPU: copied to device memory, reduced or gathered there,
// copied back (case-013); so are the *Bytes calls, through small device staging
// buffers.
//
// Stream: every call is enqueued on the communicator's stream (one it owns, or
// Options::stream) and then waited for, so that on return the data is in place as the
// Communicator contract says. The wait is a watchdog: it polls cudaStreamQuery and
// ncclCommGetAsyncError every 100 us; past Options::timeout it aborts the NCCL
// communicator (ncclCommAbort) and returns DeadlineExceeded naming the op; an
// asynchronous NCCL error also aborts it and comes back as that error. After an abort
// every call returns FailedPrecondition. The caller's work on other streams is not
// ordered with the communicator's: the caller synchronises before handing tensors in.
// Communicator creation and Split (ncclCommInitRank, ncclCommSplit) block inside NCCL and
// are not under the watchdog; a communicator made by Split owns a new stream.
//
// Ownership: the NCCL communicator and an owned stream are destroyed with the object
// (ncclCommDestroy). This header includes neither nccl.h nor CUDA's headers: handles are
// opaque. Built only with NCCL (SDRT_HAVE_NCCL).
#ifndef SDRT_COMM_NCCL_COMMUNICATOR_H_
#define SDRT_COMM_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/cuda/runtime.h"

namespace sdrt {

// ncclUniqueId as plain bytes (NCCL_UNIQUE_ID_BYTES = 128), to pass between processes.
struct NcclUniqueId {
  static constexpr int kBytes = 128;
  // ncclGetUniqueId: a fresh id (it opens NCCL's bootstrap socket on this host). NCCL's
  // error as a Status when it cannot.
  static absl::StatusOr<NcclUniqueId> Generate();
  char bytes[kBytes] = {};
};

class NcclCommunicator final : public Communicator {
 public:
  struct Options {
    // The stream every call runs on (a cudaStream_t on `device`, borrowed: it must outlive
    // the communicator); nullptr makes the communicator create and own a non-blocking one.
    StreamHandle stream = nullptr;
    // How long a call may wait for its collective before the communicator is aborted.
    std::chrono::milliseconds timeout = std::chrono::minutes(10);
  };

  // ncclCommInitRank: collective over the `size` ranks that pass the same `id`; this
  // process is `rank` and uses CUDA device `device`. InvalidArgument for a rank outside
  // [0, size), size < 1 or a device outside [0, CudaDeviceCount()) (checked before any
  // NCCL call); NCCL's or CUDA's error otherwise.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int rank, int size, int device,
                                                                  const NcclUniqueId& id,
                                                                  Options options);
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int rank, int size, int device,
                                                                  const NcclUniqueId& id) {
    return Create(rank, size, device, id, Options());
  }

  // Collective over `bootstrap`'s ranks: rank 0 generates the id and broadcasts it with
  // BroadcastBytes, then every rank calls Create(bootstrap.rank(), bootstrap.size(),
  // device, id, options). Rank 0's Generate error is broadcast (as an empty id), and the
  // ranks all-gather whether their `device` is visible before any enters ncclCommInitRank,
  // so that such errors come back on every rank instead of a hang. Costs one
  // BroadcastBytes and one AllGatherBytes on `bootstrap`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateFromCommunicator(
      Communicator& bootstrap, int device, Options options);
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateFromCommunicator(
      Communicator& bootstrap, int device) {
    return CreateFromCommunicator(bootstrap, device, Options());
  }

  ~NcclCommunicator() override;

  absl::string_view backend() const override { return "nccl"; }
  Device device() const override { return Device::CUDA(device_); }
  // The stream the collectives run on (a cudaStream_t).
  StreamHandle stream() const { return stream_; }

 protected:
  absl::Status DoAllGather(void* output, const void* input, int64_t bytes_per_rank) override;
  absl::Status DoAllGatherV(void* output, const void* input,
                            absl::Span<const int64_t> byte_counts) override;
  absl::Status DoBroadcast(absl::Span<const Tensor> tensors, int root) override;
  absl::Status DoAllReduce(Tensor& tensor, ReduceOp op) override;
  absl::Status DoBroadcastBytes(std::string* bytes, int root) override;
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;
  absl::Status DoBarrier() override;
  bool StagesCpuTensors() const override { return true; }

 private:
  // `comm` is an ncclComm_t.
  NcclCommunicator(void* comm, int rank, int size, int device, std::optional<CudaStream> owned,
                   StreamHandle stream, std::chrono::milliseconds timeout);

  // FailedPrecondition naming `op` once the communicator was aborted.
  absl::Status CheckUsable(absl::string_view op) const;
  // The watchdog described above: waits for the stream, aborting on timeout or on an
  // asynchronous NCCL error.
  absl::Status Wait(absl::string_view op);
  // Aborts the NCCL communicator (ncclCommAbort); later calls fail.
  void Abort();
  // all-gather / all-gather-v of raw buffers (either may be host memory, then staged):
  // rank i's `byte_counts[i]` bytes land at the sum of the earlier counts in `output`.
  absl::Status Gather(absl::string_view op, void* output, const void* input,
                      absl::Span<const int64_t> byte_counts);
  // Broadcasts `bytes` host bytes from `root` through a device staging buffer.
  absl::Status BroadcastHost(absl::string_view op, void* data, int64_t bytes, int root);

  void* comm_;  // ncclComm_t; nullptr once aborted
  int device_;
  std::optional<CudaStream> owned_stream_;
  StreamHandle stream_;
  std::chrono::milliseconds timeout_;
};

}  // namespace sdrt

#endif  // SDRT_COMM_NCCL_COMMUNICATOR_H_
