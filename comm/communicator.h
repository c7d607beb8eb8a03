// Communicator: the collectives sdrt needs, over one group of ranks, behind one interface
// with an MPI backend (CPU tensors, comm/mpi_communicator.h) and an NCCL one (CUDA tensors).
//
// The public calls are thin and non-virtual: each validates its arguments here, in one
// place, and only then hands raw contiguous buffers to the backend (the protected Do*
// functions). A validation error is returned without any communication, so when every
// rank makes the same mistake, all of them get the error and none is left waiting. Errors
// are absl::Status values whose message names the op, "rank R of N" and the values that
// disagree: InvalidArgument for bad arguments, the backend's own code (via
// SDRT_MPI_RETURN_IF_ERROR / SDRT_NCCL_RETURN_IF_ERROR) for failures of the library.
//
// Every rank of the group must make the same sequence of calls with matching arguments
// (the collective contract of MPI, NCCL and torch.distributed); what "matching" means is
// written beside each call. Tensors are sizes and strides in elements, PyTorch order; they
// must be defined, contiguous and on device() (MPI: the CPU; a CUDA or meta tensor is
// InvalidArgument), or on the CPU when the backend stages CPU tensors through its device
// (NCCL, case-013). Zero-element calls are cheap but keep the ranks in step
// (case-003): a collective whose total element count is zero on every rank returns
// OK without moving data. All calls are blocking: on return the data is in place.
//
// Deadlines (docs/SEMANTICS.md 11.16): every call that waits for other ranks gives up after
// timeout(), 10 minutes unless set (torch.distributed's default process-group timeout),
// and returns DeadlineExceeded naming the op and, where the backend can tell, the ranks
// that did not arrive. The communicator cannot be used after that (every later call
// returns FailedPrecondition): a collective cannot be taken back from the ranks that
// joined it. The buffers of the call that timed out may still be written by the backend
// until the job ends; a program that timed out should end its job (MpiCommunicator's
// AbortJob) rather than carry on.
//
// Thread-safety: one thread at a time per Communicator (docs/PLAN.md "Logging, threads").
#ifndef SDRT_COMM_COMMUNICATOR_H_
#define SDRT_COMM_COMMUNICATOR_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/tensor/tensor.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This process's rank in [0, size()) and the number of ranks in the group.
  int rank() const { return rank_; }
  int size() const { return size_; }
  // "mpi" or "nccl", for messages.
  virtual absl::string_view backend() const = 0;
  // The device every tensor argument must live on.
  virtual Device device() const = 0;

  // How long one call may wait for the other ranks (see "Deadlines" above); a communicator
  // made by Split starts with its parent's. Every rank should set the same value. Setting
  // it affects the calls that start afterwards.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(10);

  // torch.distributed.all_gather_into_tensor(output, input). Every rank passes an `input`
  // of the same element count n and dtype; `output` (any shape) holds size() * n elements
  // of that dtype, and rank i's input lands in elements [i * n, (i + 1) * n) of it. In
  // place when `input` is exactly that slice of `output` (same bytes); otherwise the two
  // must not overlap. n == 0 returns OK without communicating.
  absl::Status AllGather(Tensor& output, const Tensor& input);

  // torch.distributed.all_gather(tensor_list, input) with uneven sizes, as one buffer.
  // `counts[i]` is rank i's element count (the same list on every rank; counts[rank()]
  // == input.numel()); `output` holds sum(counts) elements of input's dtype, and rank i's
  // input lands at elements [counts[0] + ... + counts[i-1], + counts[i]). Ranks may
  // contribute 0 elements; when all do, returns OK without communicating. In-place
  // condition as AllGather. For a sub-byte dtype every count must be whole bytes
  // (InvalidArgument otherwise).
  absl::Status AllGatherV(Tensor& output, const Tensor& input, absl::Span<const int64_t> counts);

  // torch.distributed.broadcast(tensor, src=root) of several tensors as one grouped
  // operation (ncclGroupStart/End): `root`'s tensors are copied into the other ranks'.
  // Every rank passes tensors of the same number, dtypes and element counts, in the same
  // order; zero-element tensors are skipped. The tensors must not overlap one another.
  absl::Status Broadcast(absl::Span<Tensor> tensors, int root);

  // torch.distributed.all_reduce(tensor, op), in place: afterwards every rank's `tensor`
  // holds the element-wise reduction over the ranks (same dtype and element count on
  // every rank). kAvg is the sum divided by size() (integers: truncated, as ncclAvg).
  // float16 and bfloat16 are reduced in float32 and rounded to the dtype after each
  // combining step. bool follows ProcessGroupNCCL: sum is logical or, product logical
  // and, avg is InvalidArgument. float8, uint16/32/64, complex64 and the sub-byte floats
  // are InvalidArgument.
  absl::Status AllReduce(Tensor& tensor, ReduceOp op);

  // The most bytes one rank's message may hold in BroadcastBytes and AllGatherBytes, and
  // the most an AllGatherBytes may gather in all. These calls carry metadata; a length
  // beyond them (or a negative one, from a rank that sends garbage) is refused before any
  // memory is allocated for it.
  static constexpr int64_t kMaxBytesMessage = int64_t{1} << 30;   // 1 GiB
  static constexpr int64_t kMaxBytesGathered = int64_t{4} << 30;  // 4 GiB

  // torch.distributed.broadcast_object_list for a byte string: afterwards *bytes on
  // every rank equals root's (its previous contents are replaced). Any length from 0 to
  // kMaxBytesMessage; beyond it, InvalidArgument on every rank (the root's bytes are not
  // sent).
  absl::Status BroadcastBytes(std::string* bytes, int root);

  // torch.distributed.all_gather_object for byte strings: element i of the result is
  // rank i's `mine`. Lengths may differ, 0 included. InvalidArgument on every rank when a
  // rank's length is negative or above kMaxBytesMessage or all of them sum above
  // kMaxBytesGathered (the lengths are exchanged first, so no rank allocates for them).
  absl::StatusOr<std::vector<std::string>> AllGatherBytes(const std::string& mine);

  // torch.distributed.new_subgroups_by_enumeration / ncclCommSplit: collective over this
  // group; ranks passing the same `color` (>= 0) form a new group ordered by (key, old
  // rank). A negative color (NCCL_SPLIT_NOCOLOR) joins no group and returns nullptr.
  // The new communicator is independent of this one and may outlive it.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);

  // torch.distributed.barrier: returns once every rank has entered it.
  absl::Status Barrier();

  // One message of Exchange: `bytes` bytes at `data` going to rank `peer` (a send) or
  // coming from it (a receive). Buffers are raw memory on device() (host memory for MPI and
  // the self communicator, device memory of the communicator's GPU for NCCL).
  struct SendMessage {
    int peer = 0;
    const void* data = nullptr;
    int64_t bytes = 0;
  };
  struct ReceiveMessage {
    int peer = 0;
    void* data = nullptr;
    int64_t bytes = 0;
  };

  // Grouped point-to-point, as torch.distributed.batch_isend_irecv: every send and
  // receive is posted at once (MPI_Isend / MPI_Irecv; ncclSend / ncclRecv inside one
  // ncclGroupStart / ncclGroupEnd) and the call returns when all of them are complete.
  // Collective in its rhythm: every rank of the group calls it the same number of times,
  // each with its own messages (either list may be empty), so that the deadline and the
  // roll call see every rank. Messages between two ranks pair up in order: the k-th send
  // from rank A to rank B fills the k-th receive on B from A, which must have the same
  // byte count; a rank may send to itself (the pairs are copied). One send buffer may serve
  // several sends (the same bytes to several peers); a receive buffer must overlap no other
  // buffer. InvalidArgument, before anything is sent, for a peer outside [0, size()),
  // a negative byte count, a null buffer with bytes > 0, or sends to self and receives from
  // self that differ in number or sizes; a mismatch between two ranks is the backend's
  // error (MPI_ERR_TRUNCATE) or a deadline. Unimplemented on a backend without
  // point-to-point.
  // `overlap`, when given, runs on the calling thread while the messages move (after every
  // send and receive is posted, before waiting for them: e.g. a rank copying its own
  // pieces into place meanwhile); its error is returned once the messages are done, after
  // the exchange's own.
  using LocalWork = std::function<absl::Status()>;
  absl::Status Exchange(absl::Span<const SendMessage> sends,
                        absl::Span<const ReceiveMessage> receives,
                        const LocalWork& overlap = nullptr);
  // Whether this backend implements Exchange (MPI, NCCL and the self communicator do).
  virtual bool SupportsExchange() const { return false; }

  // The stream a device communicator runs its calls on (NCCL: a cudaStream_t of device(),
  // Options::stream or one it owns); null for host communicators (MPI, self). Work enqueued
  // on it before a call runs before that call's transfers: the transfer engine packs its
  // device buckets on it without waiting, and unpacks on it after an exchange.
  virtual StreamHandle stream() const { return nullptr; }

  // Returns once everything enqueued on stream() so far has run (at once for a host
  // communicator). Not collective. Bounded by timeout() like a collective's wait: past it
  // DeadlineExceeded, and the communicator is aborted as a collective's wait would abort it.
  // FailedPrecondition once aborted; CUDA's or NCCL's asynchronous error.
  absl::Status Synchronize();

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

  // The backend's halves of the calls above, entered only with validated arguments and
  // at least one byte to move (Split, Barrier and the *Bytes calls always). Buffers are
  // contiguous on device(); sizes are in bytes.
  virtual absl::Status DoAllGather(void* output, const void* input, int64_t bytes_per_rank) = 0;
  virtual absl::Status DoAllGatherV(void* output, const void* input,
                                    absl::Span<const int64_t> byte_counts) = 0;
  // `tensors` holds only the non-empty ones.
  virtual absl::Status DoBroadcast(absl::Span<const Tensor> tensors, int root) = 0;
  // `tensor` is non-empty and (dtype, op) a supported pair (see AllReduce).
  virtual absl::Status DoAllReduce(Tensor& tensor, ReduceOp op) = 0;
  virtual absl::Status DoBroadcastBytes(std::string* bytes, int root) = 0;
  virtual absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) = 0;
  virtual absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) = 0;
  virtual absl::Status DoBarrier() = 0;
  // Entered on every call of Exchange, even with no messages (see Exchange), with valid
  // peers and sizes. The default is Unimplemented.
  // `overlap` may be empty.
  virtual absl::Status DoExchange(absl::Span<const SendMessage> sends,
                                  absl::Span<const ReceiveMessage> receives,
                                  const LocalWork& overlap);
  // Synchronize's half; the default (host communicators) has nothing to wait for.
  virtual absl::Status DoSynchronize() { return absl::OkStatus(); }

  // AllGatherBytes in terms of a backend's all-gather-v of host bytes (`gather_host`
  // takes output, input and per-rank byte counts): one exchange of the lengths, then one
  // of the bytes unless every string is empty. Shared by the backends' DoAllGatherBytes.
  absl::StatusOr<std::vector<std::string>> AllGatherBytesVia(
      const std::string& mine,
      const std::function<absl::Status(void*, const void*, absl::Span<const int64_t>)>&
          gather_host);

  // OK when `length`, the length of rank `from`'s bytes message (as that rank sent it),
  // is in [0, kMaxBytesMessage]; else InvalidArgument naming `op` and the rank. Backends
  // call it on every length they receive before allocating for it.
  absl::Status CheckBytesLength(absl::string_view op, int from, int64_t length) const;

  // True when CPU tensors are accepted besides device() ones and staged by the backend.
  virtual bool StagesCpuTensors() const { return false; }

  // "all_gather (mpi, rank 1 of 4)": the prefix of every message about `op`.
  std::string Where(absl::string_view op) const;

 private:
  // InvalidArgument unless `t` is defined, contiguous and on device() (or on the CPU when
  // StagesCpuTensors()); `what` names it.
  absl::Status CheckTensor(absl::string_view op, absl::string_view what, const Tensor& t) const;
  absl::Status CheckRoot(absl::string_view op, int root) const;

  int rank_;
  int size_;
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

}  // namespace sdrt

#endif  // SDRT_COMM_COMMUNICATOR_H_
