// NcclCommunicator: the NCCL backend of Communicator, for CUDA tensors on one device
// (PyTorch's ProcessGroupNCCL). One process (or thread) per GPU; the ranks meet through an
// NcclUniqueId that rank 0 makes and every rank receives: over a bootstrap Communicator
// (CreateFromCommunicator, e.g. an MpiCommunicator), from the embedding program's own
// launcher, or made locally for a single rank, so a build without MPI still runs NCCL.
// The device is the caller's choice: an engine passes the GPU it bound its process to
// (usually its node-local rank), as the `sdrt` commands do (tools/sdrt/internal/session.h).
//
// Data moves as bytes (ncclUint8); only all-reduce uses typed NCCL datatypes (float16 and
// bfloat16 are native in NCCL). NCCL has no 16-bit integer type, so an int16 all-reduce
// is InvalidArgument here (as in ProcessGroupNCCL); the MPI backend reduces int16. CPU
// tensors are accepted too and staged through the GPU: copied to device memory, reduced or
// gathered there, copied back (case-013; a broadcast root copies nothing back); so are the
// *Bytes calls and the barrier's flag. All staging goes through one device buffer per
// communicator that grows to the largest staged call (in steps of 1 MiB) and is kept for
// the next call, so a staged call costs no cudaMalloc / cudaFree (each a device-wide
// synchronisation) once the buffer is large enough; it is freed with the communicator.
//
// Reductions match the MPI backend where the arithmetic allows: avg is an ncclSum followed
// by a division by size() on the device in the tensor's dtype, the MPI backend's own
// second step (integers truncate; float16 and bfloat16 divide in float32 and round to
// nearest even), not ncclAvg (which pre-multiplies floats by 1/size()). So integer and bool
// results (every op, avg included) are bit-equal to the MPI backend's for any rank count,
// and so are min and max of floats (each picks one rank's value) except where NaN, or
// zeros of both signs, meet (each library has its own rule). Float sum, product and avg
// are bit-equal for 2 ranks (one combining step, the same correctly rounded operation in
// both; for float16 and bfloat16, float32 then rounding equals the correctly rounded
// 16-bit operation); with 3 or more ranks the two libraries combine the ranks' floats in
// different orders (NCCL: ring or tree, chunk by chunk; MPI: its algorithm's order), so
// sums and products, and with them averages, may differ in the last bits, as they may
// between two MPI implementations. NaN payloads are not kept alike (a GPU returns its
// canonical NaN).
//
// Stream and watchdog: every call is enqueued on the communicator's stream (one it owns,
// or Options::stream) and then waited for, so that on return the data is in place as the
// Communicator contract says. NCCL communicators are created non-blocking
// (ncclCommInitRankConfig and ncclCommSplit with blocking = 0): no NCCL call blocks the
// host, and each (creation, split, every collective enqueue and ncclGroupEnd, which
// return ncclInProgress while NCCL connects or enqueues in the background, e.g. the first
// collective's lazy connection setup) is followed by polling ncclCommGetAsyncError until
// it is no longer ncclInProgress; then the stream is polled with cudaStreamQuery. Both
// polls run every 100 us under one deadline per call, timeout() from its start;
// past it the NCCL communicator is aborted (ncclCommAbort, on a thread of its own, so that
// a stream that stays blocked cannot hold the call past its deadline: the abort frees
// device memory, which waits for the device's streams; the process waits up to 10 s at
// exit for such aborts) and the call returns DeadlineExceeded naming the op; an NCCL or CUDA error also aborts it and comes back as
// that error. Create and Split clean up the same way (no communicator is returned). After
// an abort every call returns FailedPrecondition, and the staging buffer is deliberately
// leaked (kept for the life of the process): freeing device memory (cudaFree)
// synchronises the device, which can block forever behind a kernel of the aborted
// collective. The caller's work on other streams is not ordered with the communicator's:
// the caller synchronises before handing tensors in. A communicator made by Split owns a
// new stream.
//
// Ownership: an adopted communicator (Adopt) stays the caller's, see there. Otherwise the
// NCCL communicator, an owned stream and the staging buffer are released with the object: ncclCommFinalize, polled under timeout(), then ncclCommDestroy;
// ncclCommAbort instead when finalising fails or times out (e.g. a peer is gone), and then
// the staging buffer is leaked as above. This header includes neither nccl.h nor CUDA's
// headers: handles are opaque. In a build without NCCL the same header is served by
// comm/nccl_communicator_nonccl.cc: every constructor (and NcclUniqueId::Generate) returns
// Unavailable.
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
#include "sdrt/export.h"

namespace sdrt SDRT_API {

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
    // How long a call may wait for its collective before the communicator is aborted: the
    // communicator's timeout() (set_timeout changes it later).
    std::chrono::milliseconds timeout = kDefaultTimeout;
  };

  // ncclCommInitRankConfig (non-blocking): collective over the `size` ranks that pass the
  // same `id`; this process (or thread) is `rank` and uses CUDA device `device`, which must
  // differ from every other rank's on the same host (NCCL refuses duplicate GPUs).
  // InvalidArgument for a rank outside [0, size), size < 1 or a device outside
  // [0, CudaDeviceCount()) (checked before any NCCL call); DeadlineExceeded when the
  // communicator is not ready within options.timeout (e.g. a rank never calls Create; the
  // half-made communicator is aborted, on a thread of its own); NCCL's or CUDA's error
  // otherwise (NCCL's invalid usage, which is how it refuses two ranks on one GPU, with that
  // hint added to the message).
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
  // ranks all-gather whether their `device` is visible before any enters NCCL's init,
  // so that such errors come back on every rank instead of a hang. Costs one
  // BroadcastBytes and one AllGatherBytes on `bootstrap`.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateFromCommunicator(
      Communicator& bootstrap, int device, Options options);
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateFromCommunicator(
      Communicator& bootstrap, int device) {
    return CreateFromCommunicator(bootstrap, device, Options());
  }

  struct AdoptOptions {
    // As Options::stream: borrowed when set, else the communicator creates and owns one.
    StreamHandle stream = nullptr;
    // The communicator's timeout() (every call's deadline).
    std::chrono::milliseconds timeout = kDefaultTimeout;
    // What a call that fails or passes its deadline does to the adopted ncclComm_t. false
    // (the default): nothing; the call returns its error, this NcclCommunicator is
    // unusable from then on (FailedPrecondition), and recovering the ncclComm_t is the
    // caller's (ncclCommAbort it: a collective of the failed call may still be pending on
    // the GPU). true: sdrt aborts it at once, as its own communicators (ncclCommAbort on a
    // thread of its own); the caller must then neither use nor destroy it.
    bool abort_on_error = false;
  };

  // Wraps an ncclComm_t the caller made (an engine's own communicator, e.g. from
  // ncclCommInitRank) without taking it over: the caller keeps ownership and destroys it
  // after this object (destroying this object finalises nothing and leaves the ncclComm_t
  // usable). Local: no collective runs. `rank`, `size` and `device` are what the caller
  // believes of the communicator and are checked against NCCL's own answers
  // (ncclCommUserRank, ncclCommCount, ncclCommCuDevice), so a wrong pointer or a
  // communicator of another shape is an error here rather than a hang later. A
  // communicator still being created non-blocking is waited for (under options.timeout).
  // Deadlines: every call is watched as on sdrt's own communicators, but a blocking
  // communicator (NCCL's default, ncclConfig_t.blocking = 1) can block the host inside
  // NCCL (e.g. while connecting to a peer that never comes), where no deadline reaches;
  // create it with blocking = 0 for every deadline to hold. Communicators made by Split
  // are sdrt's own (owned, aborted on error). The caller must not use the ncclComm_t from
  // another thread while a call of this object runs (NCCL's rule for one communicator).
  // InvalidArgument for a null `nccl_comm`, a rank outside [0, size), size < 1, a device
  // outside [0, CudaDeviceCount()) (checked before `nccl_comm` is touched), or a rank, size
  // or device that differs from NCCL's; DeadlineExceeded when the communicator is still
  // initialising after options.timeout; NCCL's asynchronous error when it is in one;
  // CUDA's error when a stream cannot be made. Nothing is aborted on any of these.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Adopt(void* nccl_comm, int rank,
                                                                 int size, int device,
                                                                 AdoptOptions options);

  ~NcclCommunicator() override;

  absl::string_view backend() const override { return "nccl"; }
  bool SupportsExchange() const override { return true; }
  Device device() const override { return Device::CUDA(device_); }
  // The stream the collectives run on (a cudaStream_t).
  StreamHandle stream() const override { return stream_; }

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
  // comm/nccl_exchange.cc.
  absl::Status DoExchange(absl::Span<const SendMessage> sends,
                          absl::Span<const ReceiveMessage> receives,
                          const LocalWork& overlap) override;
  // The stream half of the watchdog (Wait) under a deadline of timeout() from now.
  absl::Status DoSynchronize() override;
  bool StagesCpuTensors() const override { return true; }

 private:
  using Clock = std::chrono::steady_clock;

  // `comm` is an ncclComm_t, ready for use; owned (finalised and destroyed with this
  // object, aborted on error) unless `adopted`, when it is aborted on error only if
  // `abort_adopted`.
  NcclCommunicator(void* comm, int rank, int size, int device, std::optional<CudaStream> owned,
                   StreamHandle stream, std::chrono::milliseconds timeout, bool adopted = false,
                   bool abort_adopted = false);

  // The deadline of a call starting now: timeout() from now.
  Clock::time_point Deadline() const { return Clock::now() + timeout(); }
  // FailedPrecondition naming `op` once the communicator was aborted.
  absl::Status CheckUsable(absl::string_view op) const;
  // After the NCCL call `call` returned `result` (an ncclResult_t): OK once the
  // communicator's state (ncclCommGetAsyncError) is no longer ncclInProgress and is
  // ncclSuccess, i.e. the call's work is enqueued on the stream. An error result, an
  // asynchronous error or `deadline` passing aborts the communicator and returns that
  // error (DeadlineExceeded for the deadline), prefixed with Where(op).
  absl::Status Settle(absl::string_view op, int result, const char* call,
                      Clock::time_point deadline);
  // The stream half of the watchdog: waits for the stream, aborting on an error of CUDA or
  // NCCL or when `deadline` passes (DeadlineExceeded).
  absl::Status Wait(absl::string_view op, Clock::time_point deadline);
  // Aborts the NCCL communicator (ncclCommAbort on a thread of its own, returning at once;
  // an adopted one only when the caller asked for it) and leaks the staging buffer (see
  // above); later calls fail.
  void Abort();
  // The staging buffer, grown to hold at least `bytes` bytes (its contents are not kept
  // when it grows); a device pointer.
  absl::StatusOr<char*> Staging(int64_t bytes);
  // all-gather / all-gather-v of raw buffers (either may be host memory, then staged):
  // rank i's `byte_counts[i]` bytes land at the sum of the earlier counts in `output`.
  absl::Status Gather(absl::string_view op, void* output, const void* input,
                      absl::Span<const int64_t> byte_counts);
  // Broadcasts `bytes` host bytes from `root` through the staging buffer.
  absl::Status BroadcastHost(absl::string_view op, void* data, int64_t bytes, int root);

  void* comm_;  // ncclComm_t; nullptr once aborted or destroyed
  bool adopted_;        // the caller's ncclComm_t (Adopt): never finalised or destroyed here
  bool abort_adopted_;  // AdoptOptions::abort_on_error
  int device_;
  std::optional<CudaStream> owned_stream_;
  StreamHandle stream_;
  DeviceBuffer staging_;  // null until a call stages bytes
};

}  // namespace sdrt

#endif  // SDRT_COMM_NCCL_COMMUNICATOR_H_
