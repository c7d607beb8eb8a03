#include "sdrt/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/divide.h"
#include "sdrt/comm/internal/nccl_check.h"
#include "sdrt/comm/internal/nccl_types.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

static_assert(NcclUniqueId::kBytes == NCCL_UNIQUE_ID_BYTES, "NcclUniqueId must match NCCL's");
static_assert(sizeof(ncclUniqueId) == NcclUniqueId::kBytes, "NcclUniqueId must match NCCL's");

using Clock = std::chrono::steady_clock;

constexpr std::chrono::microseconds kPollInterval(100);
// The staging buffer grows in steps of this many bytes (the first covers every metadata
// call), and staged pieces start at multiples of kStagingAlignment in it.
constexpr int64_t kStagingGranule = int64_t{1} << 20;
constexpr int64_t kStagingAlignment = 256;

ncclComm_t ToComm(void* comm) { return static_cast<ncclComm_t>(comm); }
cudaStream_t ToStream(StreamHandle stream) { return static_cast<cudaStream_t>(stream); }

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// True when `ptr` is host memory (pageable or pinned), which the backend stages.
absl::StatusOr<bool> IsHost(const void* ptr) {
  cudaPointerAttributes attributes;
  SDRT_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, ptr));
  return attributes.type == cudaMemoryTypeHost || attributes.type == cudaMemoryTypeUnregistered;
}

// `status` with "`where`: " in front of its message.
absl::Status Prefixed(absl::string_view where, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(where, ": ", status.message()));
}

using internal::AbortedBy;

// The aborts still running on their own threads (AbortLater), and the wait for them when
// the process exits.
struct PendingAborts {
  std::mutex mutex;
  std::condition_variable done;
  int running = 0;
};

PendingAborts& Pending() {
  static auto* pending = new PendingAborts();  // never destroyed: threads may outlive main
  return *pending;
}

// Runs ncclCommAbort(comm) on a thread of its own and returns at once. ncclCommAbort frees
// device memory, and cudaFree waits for every stream of the device: an abort after a
// deadline would hold the caller for as long as the stream stays blocked (measured on an
// H200 with NCCL 2.28.3: a call with a 2 s deadline returned after 10 s, when the stream
// was let go). The thread enters `device` first. At exit the process waits up to 10 s for
// aborts still running, so that none is cut off while CUDA shuts down.
void AbortLater(ncclComm_t comm, int device) {
  PendingAborts& pending = Pending();
  {
    std::lock_guard<std::mutex> lock(pending.mutex);
    static const bool registered = [] {
      std::atexit([] {
        PendingAborts& p = Pending();
        std::unique_lock<std::mutex> wait(p.mutex);
        p.done.wait_for(wait, std::chrono::seconds(10), [&p] { return p.running == 0; });
      });
      return true;
    }();
    (void)registered;
    ++pending.running;
  }
  const auto abort = [comm, device] {
    (void)cudaSetDevice(device);
    (void)ncclCommAbort(comm);
    PendingAborts& p = Pending();
    std::lock_guard<std::mutex> lock(p.mutex);
    --p.running;
    p.done.notify_all();
  };
  try {
    std::thread(abort).detach();
  } catch (const std::system_error&) {
    abort();  // no thread to be had (a process at its limit): abort here, waiting if it must
  }
}

// Keeps `buffer` allocated for the rest of the process: the staging buffer of an aborted
// communicator, which must not be freed (cudaFree synchronises the device and can block
// behind a kernel of the aborted collective). Reachable from a static, so leak checkers
// do not report it.
void KeepForever(DeviceBuffer buffer) {
  static std::mutex mutex;
  static auto* kept = new std::vector<DeviceBuffer>();
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buffer));
}

// Polls `comm`'s state (ncclCommGetAsyncError) until it is no longer ncclInProgress: OK
// for ncclSuccess, NCCL's error for an asynchronous error, DeadlineExceeded ("`call` not
// complete after T ms") once `deadline` has passed. Aborts nothing.
absl::Status AwaitComm(ncclComm_t comm, Clock::time_point deadline,
                       std::chrono::milliseconds timeout, const char* call) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    SDRT_NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return internal::NcclStatus(state, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    if (Clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(call, " not complete after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// InvalidArgument (prefixed by `where`) for a rank outside [0, size), size < 1 or a device
// that is not a visible CUDA device; checked before any NCCL call.
absl::Status CheckRankAndDevice(absl::string_view where, int rank, int size, int device) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": rank ", rank, " is not in [0, size = ", size, ")"));
  }
  const int device_count = CudaDeviceCount();
  if (device < 0 || device >= device_count) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": device ", device, " is not in [0, ",
                                                   device_count, ") (the visible CUDA devices)"));
  }
  return absl::OkStatus();
}

// ncclConfig_t of a non-blocking communicator.
ncclConfig_t NonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

// Settle(op, result, "call text", deadline) for an NCCL call.
#define SDRT_NCCL_SETTLE(op, expr, deadline) Settle((op), (expr), #expr, (deadline))

absl::StatusOr<NcclUniqueId> NcclUniqueId::Generate() {
  ncclUniqueId nccl_id;
  SDRT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&nccl_id));
  NcclUniqueId id;
  std::memcpy(id.bytes, &nccl_id, kBytes);
  return id;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(int rank, int size,
                                                                           int device,
                                                                           const NcclUniqueId& id,
                                                                           Options options) {
  const std::string where =
      absl::StrCat("NcclCommunicator::Create (rank ", rank, " of ", size, ")");
  SDRT_RETURN_IF_ERROR(CheckRankAndDevice(where, rank, size, device));
  const Clock::time_point deadline = Clock::now() + options.timeout;
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  std::optional<CudaStream> owned;
  StreamHandle stream = options.stream;
  if (stream == nullptr) {
    SDRT_ASSIGN_OR_RETURN(CudaStream created, CudaStream::Create(device));
    owned.emplace(std::move(created));
    stream = owned->handle();
  }
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.bytes, NcclUniqueId::kBytes);
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, nccl_id, rank, &config);
  absl::Status status =
      started == ncclInProgress
          ? absl::OkStatus()
          : internal::NcclStatus(started, "ncclCommInitRankConfig", __FILE__, __LINE__);
  if (status.ok()) status = AwaitComm(comm, deadline, options.timeout, "ncclCommInitRankConfig");
  if (!status.ok()) {
    // NCCL's result, for the hint: the call's, or the asynchronous error AwaitComm saw
    // (kept by the communicator; still ncclInProgress after a timeout).
    ncclResult_t result = started;
    if (started == ncclInProgress && comm != nullptr) (void)ncclCommGetAsyncError(comm, &result);
    if (comm == nullptr) return internal::WithInitHint(result, Prefixed(where, status));
    AbortLater(comm, device);  // on its own thread: the call returns by its deadline
    return internal::WithInitHint(result, AbortedBy(where, status));
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, rank, size, device, std::move(owned), stream, options.timeout));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateFromCommunicator(
    Communicator& bootstrap, int device, Options options) {
  absl::Status generated;
  std::string id_bytes;
  if (bootstrap.rank() == 0) {
    absl::StatusOr<NcclUniqueId> id = NcclUniqueId::Generate();
    if (id.ok()) {
      id_bytes.assign(id->bytes, NcclUniqueId::kBytes);
    } else {
      generated = id.status();
    }
  }
  SDRT_RETURN_IF_ERROR(bootstrap.BroadcastBytes(&id_bytes, 0));
  SDRT_RETURN_IF_ERROR(generated);
  if (id_bytes.size() != NcclUniqueId::kBytes) {
    return absl::UnavailableError(absl::StrCat("NcclCommunicator::CreateFromCommunicator (rank ",
                                               bootstrap.rank(), " of ", bootstrap.size(),
                                               "): rank 0 could not generate an NCCL unique id"));
  }
  // Every rank learns whether every device is usable before any rank enters NCCL's init,
  // so a bad device on one rank is an error everywhere at once, not a wait for the
  // deadline.
  const int device_count = CudaDeviceCount();
  const bool usable = device >= 0 && device < device_count;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> ready,
                        bootstrap.AllGatherBytes(usable ? "1" : "0"));
  for (int i = 0; i < bootstrap.size(); ++i) {
    if (ready[i] != "1") {
      return absl::InvalidArgumentError(absl::StrCat(
          "NcclCommunicator::CreateFromCommunicator (rank ", bootstrap.rank(), " of ",
          bootstrap.size(), "): rank ", i, "'s device is not a visible CUDA device",
          i == bootstrap.rank() ? absl::StrCat(" (", device, " of ", device_count, ")") : ""));
    }
  }
  NcclUniqueId id;
  std::memcpy(id.bytes, id_bytes.data(), NcclUniqueId::kBytes);
  return Create(bootstrap.rank(), bootstrap.size(), device, id, options);
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Adopt(void* nccl_comm,
                                                                          int rank, int size,
                                                                          int device,
                                                                          AdoptOptions options) {
  const std::string where = absl::StrCat("NcclCommunicator::Adopt (rank ", rank, " of ", size, ")");
  if (nccl_comm == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the ncclComm_t is null"));
  }
  SDRT_RETURN_IF_ERROR(CheckRankAndDevice(where, rank, size, device));
  const Clock::time_point deadline = Clock::now() + options.timeout;
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device));
  const ncclComm_t comm = ToComm(nccl_comm);
  SDRT_RETURN_IF_ERROR(
      Prefixed(where, AwaitComm(comm, deadline, options.timeout, "the adopted communicator")));
  int nccl_rank = -1;
  int nccl_size = -1;
  int nccl_device = -1;
  SDRT_RETURN_IF_ERROR(Prefixed(where, SDRT_NCCL_STATUS(ncclCommUserRank(comm, &nccl_rank))));
  SDRT_RETURN_IF_ERROR(Prefixed(where, SDRT_NCCL_STATUS(ncclCommCount(comm, &nccl_size))));
  SDRT_RETURN_IF_ERROR(Prefixed(where, SDRT_NCCL_STATUS(ncclCommCuDevice(comm, &nccl_device))));
  if (nccl_rank != rank || nccl_size != size || nccl_device != device) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": NCCL says the communicator is rank ", nccl_rank, " of ", nccl_size,
        " on CUDA device ", nccl_device, ", not rank ", rank, " of ", size, " on device ",
        device));
  }
  std::optional<CudaStream> owned;
  StreamHandle stream = options.stream;
  if (stream == nullptr) {
    SDRT_ASSIGN_OR_RETURN(CudaStream created, CudaStream::Create(device));
    owned.emplace(std::move(created));
    stream = owned->handle();
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(nccl_comm, rank, size, device, std::move(owned), stream,
                           options.timeout, /*adopted=*/true, options.abort_on_error));
}

NcclCommunicator::NcclCommunicator(void* comm, int rank, int size, int device,
                                   std::optional<CudaStream> owned, StreamHandle stream,
                                   std::chrono::milliseconds timeout, bool adopted,
                                   bool abort_adopted)
    : Communicator(rank, size),
      comm_(comm),
      adopted_(adopted),
      abort_adopted_(abort_adopted),
      device_(device),
      owned_stream_(std::move(owned)),
      stream_(stream) {
  set_timeout(timeout);
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;  // aborted: the staging buffer is kept forever
  // The caller's communicator stays as it is (every call waited for its stream, so
  // nothing of this object's is in flight); the staging buffer and stream go.
  if (adopted_) return;
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  const ncclComm_t comm = ToComm(comm_);
  bool finalized = guard.Enter(device_).ok();
  if (finalized) {
    const ncclResult_t result = ncclCommFinalize(comm);
    finalized = (result == ncclSuccess || result == ncclInProgress) &&
                AwaitComm(comm, deadline, timeout(), "ncclCommFinalize").ok();
  }
  if (!finalized) {
    Abort();
    return;
  }
  (void)ncclCommDestroy(comm);
  comm_ = nullptr;
}

absl::Status NcclCommunicator::CheckUsable(absl::string_view op) const {
  if (comm_ != nullptr) return absl::OkStatus();
  if (adopted_ && !abort_adopted_) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(op),
                     ": unusable after an earlier error or timeout (the adopted ncclComm_t was "
                     "left to its owner, who must abort it)"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      Where(op), ": the NCCL communicator was aborted by an earlier error or timeout"));
}

void NcclCommunicator::Abort() {
  if (comm_ == nullptr) return;
  if (!adopted_ || abort_adopted_) AbortLater(ToComm(comm_), device_);
  comm_ = nullptr;
  if (staging_ != nullptr) KeepForever(std::move(staging_));
}

absl::Status NcclCommunicator::Settle(absl::string_view op, int result, const char* call,
                                      Clock::time_point deadline) {
  const auto nccl_result = static_cast<ncclResult_t>(result);
  absl::Status status = nccl_result == ncclInProgress
                            ? absl::OkStatus()
                            : internal::NcclStatus(nccl_result, call, __FILE__, __LINE__);
  if (status.ok()) status = AwaitComm(ToComm(comm_), deadline, timeout(), call);
  if (status.ok()) return status;
  Abort();
  return AbortedBy(Where(op), status);
}

absl::Status NcclCommunicator::Wait(absl::string_view op, Clock::time_point deadline) {
  while (true) {
    const cudaError_t done = cudaStreamQuery(ToStream(stream_));
    if (done == cudaSuccess) return absl::OkStatus();
    if (done != cudaErrorNotReady) {
      absl::Status error = SDRT_CUDA_STATUS(done);
      Abort();
      return AbortedBy(Where(op), error);
    }
    ncclResult_t async_error = ncclSuccess;
    absl::Status query = SDRT_NCCL_STATUS(ncclCommGetAsyncError(ToComm(comm_), &async_error));
    if (query.ok() && async_error != ncclSuccess && async_error != ncclInProgress) {
      query = internal::NcclStatus(async_error, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    if (!query.ok()) {
      Abort();
      return AbortedBy(Where(op), query);
    }
    if (Clock::now() > deadline) {
      Abort();
      return AbortedBy(Where(op), absl::DeadlineExceededError(absl::StrCat(
                                      "not complete after ", timeout().count(), " ms")));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::StatusOr<char*> NcclCommunicator::Staging(int64_t bytes) {
  if (staging_ == nullptr || staging_->nbytes() < bytes) {
    // Nothing of this communicator's is in flight between calls, so the old buffer can go
    // first (cudaFree); a failed allocation leaves none.
    staging_.reset();
    SDRT_ASSIGN_OR_RETURN(
        staging_,
        AllocateDeviceBuffer(RoundUp(std::max<int64_t>(bytes, 1), kStagingGranule), device_));
  }
  return static_cast<char*>(staging_->data());
}

absl::Status NcclCommunicator::Gather(absl::string_view op, void* output, const void* input,
                                      absl::Span<const int64_t> byte_counts) {
  SDRT_RETURN_IF_ERROR(CheckUsable(op));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  std::vector<int64_t> offsets(size());
  int64_t total = 0;
  bool even = true;
  for (int i = 0; i < size(); ++i) {
    offsets[i] = total;
    total += byte_counts[i];
    even = even && byte_counts[i] == byte_counts[0];
  }
  const int64_t mine = byte_counts[rank()];
  char* out = static_cast<char*>(output);
  const bool in_place = input == out + offsets[rank()];
  SDRT_ASSIGN_OR_RETURN(const bool out_host, IsHost(output));
  bool in_host = false;
  if (mine > 0 && in_place) {
    in_host = out_host;
  } else if (mine > 0) {
    SDRT_ASSIGN_OR_RETURN(in_host, IsHost(input));
  }
  // Host memory is staged: the output's bytes at the start of the staging buffer, a
  // separate host input after them.
  const int64_t in_at = out_host ? RoundUp(total, kStagingAlignment) : 0;
  const int64_t staged = (out_host ? in_at : 0) + (in_host && !in_place ? mine : 0);
  char* staging = nullptr;
  if (staged > 0) {
    SDRT_ASSIGN_OR_RETURN(staging, Staging(staged));
  }
  char* device_out = out_host ? staging : out;
  const char* device_in = static_cast<const char*>(input);
  if (in_place) {
    device_in = device_out + offsets[rank()];
  } else if (in_host) {
    device_in = staging + in_at;
  }
  const cudaStream_t stream = ToStream(stream_);
  if (in_host) {
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(const_cast<char*>(device_in), input, mine, cudaMemcpyHostToDevice, stream));
  }
  const ncclComm_t comm = ToComm(comm_);
  if (even) {
    SDRT_RETURN_IF_ERROR(SDRT_NCCL_SETTLE(
        op, ncclAllGather(device_in, device_out, mine, ncclUint8, comm, stream), deadline));
  } else {
    // torch's all_gather with uneven sizes: one grouped broadcast per contributing rank.
    SDRT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
    absl::Status enqueued;
    for (int i = 0; i < size() && enqueued.ok(); ++i) {
      if (byte_counts[i] == 0) continue;
      char* slot = device_out + offsets[i];
      enqueued = SDRT_NCCL_STATUS(ncclBroadcast(i == rank() ? device_in : slot, slot,
                                                byte_counts[i], ncclUint8, i, comm, stream));
    }
    const ncclResult_t ended = ncclGroupEnd();
    if (!enqueued.ok()) {
      Abort();
      return AbortedBy(Where(op), enqueued);
    }
    SDRT_RETURN_IF_ERROR(Settle(op, ended, "ncclGroupEnd", deadline));
  }
  SDRT_RETURN_IF_ERROR(Wait(op, deadline));
  if (!out_host) return absl::OkStatus();
  // Copied back only after the wait: a copy into pageable memory may block the host until
  // the collective ends, which would bypass the watchdog.
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(output, device_out, total, cudaMemcpyDeviceToHost, stream));
  return Wait(op, deadline);
}

absl::Status NcclCommunicator::DoAllGather(void* output, const void* input,
                                           int64_t bytes_per_rank) {
  return Gather("all_gather", output, input, std::vector<int64_t>(size(), bytes_per_rank));
}

absl::Status NcclCommunicator::DoAllGatherV(void* output, const void* input,
                                            absl::Span<const int64_t> byte_counts) {
  return Gather("all_gather_v", output, input, byte_counts);
}

absl::Status NcclCommunicator::DoBroadcast(absl::Span<const Tensor> tensors, int root) {
  constexpr absl::string_view kOp = "broadcast";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  // CPU tensors are staged at aligned offsets of the staging buffer (staged_at[i] >= 0).
  std::vector<int64_t> staged_at(tensors.size(), -1);
  int64_t staged = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].device().is_cpu()) continue;
    staged_at[i] = staged;
    staged = RoundUp(staged + tensors[i].nbytes(), kStagingAlignment);
  }
  char* staging = nullptr;
  if (staged > 0) {
    SDRT_ASSIGN_OR_RETURN(staging, Staging(staged));
  }
  const cudaStream_t stream = ToStream(stream_);
  std::vector<void*> data(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (staged_at[i] < 0) {
      data[i] = tensors[i].data_ptr();
      continue;
    }
    data[i] = staging + staged_at[i];
    if (rank() == root) {  // only the root's bytes are sent
      SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data[i], tensors[i].data_ptr(), tensors[i].nbytes(),
                                                cudaMemcpyHostToDevice, stream));
    }
  }
  SDRT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status enqueued;
  for (size_t i = 0; i < tensors.size() && enqueued.ok(); ++i) {
    enqueued = SDRT_NCCL_STATUS(ncclBroadcast(data[i], data[i], tensors[i].nbytes(), ncclUint8,
                                              root, ToComm(comm_), stream));
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (!enqueued.ok()) {
    Abort();
    return AbortedBy(Where(kOp), enqueued);
  }
  SDRT_RETURN_IF_ERROR(Settle(kOp, ended, "ncclGroupEnd", deadline));
  SDRT_RETURN_IF_ERROR(Wait(kOp, deadline));
  if (rank() == root || staged == 0) return absl::OkStatus();  // the root's are unchanged
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (staged_at[i] < 0) continue;
    SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(tensors[i].data_ptr(), data[i], tensors[i].nbytes(),
                                              cudaMemcpyDeviceToHost, stream));
  }
  return Wait(kOp, deadline);
}

absl::Status NcclCommunicator::DoAllReduce(Tensor& tensor, ReduceOp op) {
  constexpr absl::string_view kOp = "all_reduce";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const int datatype = internal::NcclDataType(tensor.dtype());
  if (datatype == ncclNumTypes) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kOp), ": NCCL cannot reduce ", DTypeName(tensor.dtype()), " (as ProcessGroupNCCL)"));
  }
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  const bool staged = tensor.device().is_cpu();
  const int64_t bytes = tensor.nbytes();
  const cudaStream_t stream = ToStream(stream_);
  char* data = static_cast<char*>(tensor.data_ptr());
  if (staged) {
    SDRT_ASSIGN_OR_RETURN(data, Staging(bytes));
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(data, tensor.data_ptr(), bytes, cudaMemcpyHostToDevice, stream));
  }
  SDRT_RETURN_IF_ERROR(SDRT_NCCL_SETTLE(
      kOp,
      ncclAllReduce(data, data, tensor.numel(), static_cast<ncclDataType_t>(datatype),
                    static_cast<ncclRedOp_t>(internal::NcclReduceOp(tensor.dtype(), op)),
                    ToComm(comm_), stream),
      deadline));
  // The sum, divided as the MPI backend divides it. When the division cannot be launched
  // the all-reduce is still on the stream: waited for before the error comes back, so that
  // the caller does not free `tensor` (or a later call the staging buffer) under it.
  const absl::Status divided =
      op == ReduceOp::kAvg
          ? internal::DivideOnDevice(data, tensor.dtype(), tensor.numel(), size(), stream_)
          : absl::OkStatus();
  SDRT_RETURN_IF_ERROR(Wait(kOp, deadline));
  SDRT_RETURN_IF_ERROR(divided);
  if (!staged) return absl::OkStatus();
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(tensor.data_ptr(), data, bytes, cudaMemcpyDeviceToHost, stream));
  return Wait(kOp, deadline);
}

absl::Status NcclCommunicator::BroadcastHost(absl::string_view op, void* data, int64_t bytes,
                                             int root) {
  SDRT_RETURN_IF_ERROR(CheckUsable(op));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  SDRT_ASSIGN_OR_RETURN(char* staging, Staging(bytes));
  const cudaStream_t stream = ToStream(stream_);
  if (rank() == root) {
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(staging, data, bytes, cudaMemcpyHostToDevice, stream));
  }
  SDRT_RETURN_IF_ERROR(SDRT_NCCL_SETTLE(
      op, ncclBroadcast(staging, staging, bytes, ncclUint8, root, ToComm(comm_), stream),
      deadline));
  SDRT_RETURN_IF_ERROR(Wait(op, deadline));  // before the copy back, as in Gather
  if (rank() == root) return absl::OkStatus();
  SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, staging, bytes, cudaMemcpyDeviceToHost, stream));
  return Wait(op, deadline);
}

absl::Status NcclCommunicator::DoBroadcastBytes(std::string* bytes, int root) {
  constexpr absl::string_view kOp = "broadcast_bytes";
  int64_t length = static_cast<int64_t>(bytes->size());
  SDRT_RETURN_IF_ERROR(BroadcastHost(kOp, &length, sizeof(length), root));
  SDRT_RETURN_IF_ERROR(CheckBytesLength(kOp, root, length));
  if (rank() != root) bytes->assign(length, '\0');
  if (length == 0) return absl::OkStatus();
  return BroadcastHost(kOp, bytes->data(), length, root);
}

absl::StatusOr<std::vector<std::string>> NcclCommunicator::DoAllGatherBytes(
    const std::string& mine) {
  return AllGatherBytesVia(
      mine, [this](void* out, const void* in, absl::Span<const int64_t> byte_counts) {
        return Gather("all_gather_bytes", out, in, byte_counts);
      });
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::DoSplit(int color, int key) {
  constexpr absl::string_view kOp = "split";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  // Non-blocking, the split runs in the background on the parent: `child` is set (or left
  // null for no color) when the parent is no longer in progress. Settle aborts the parent
  // on failure, which also ends the split; a child made by then is aborted too.
  ncclConfig_t config = NonBlockingConfig();
  ncclComm_t child = nullptr;
  absl::Status status = SDRT_NCCL_SETTLE(
      kOp,
      ncclCommSplit(ToComm(comm_), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, &config),
      deadline);
  if (!status.ok()) {
    if (child != nullptr) AbortLater(child, device_);
    return status;
  }
  if (child == nullptr) return std::unique_ptr<Communicator>();
  status = AwaitComm(child, deadline, timeout(), "ncclCommSplit");
  int child_rank = 0;
  int child_size = 0;
  if (status.ok()) status = SDRT_NCCL_STATUS(ncclCommUserRank(child, &child_rank));
  if (status.ok()) status = SDRT_NCCL_STATUS(ncclCommCount(child, &child_size));
  absl::StatusOr<CudaStream> stream = CudaStream::Create(device_);
  if (status.ok()) status = stream.status();
  if (!status.ok()) {
    AbortLater(child, device_);
    return AbortedBy(Where(kOp), status);
  }
  std::optional<CudaStream> owned(std::move(*stream));
  const StreamHandle handle = owned->handle();
  return std::unique_ptr<Communicator>(new NcclCommunicator(child, child_rank, child_size, device_,
                                                            std::move(owned), handle, timeout()));
}

absl::Status NcclCommunicator::DoBarrier() {
  constexpr absl::string_view kOp = "barrier";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  SDRT_ASSIGN_OR_RETURN(char* flag, Staging(sizeof(int32_t)));
  const cudaStream_t stream = ToStream(stream_);
  SDRT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(flag, 0, sizeof(int32_t), stream));
  SDRT_RETURN_IF_ERROR(SDRT_NCCL_SETTLE(
      kOp, ncclAllReduce(flag, flag, 1, ncclInt32, ncclSum, ToComm(comm_), stream), deadline));
  return Wait(kOp, deadline);
}

}  // namespace sdrt
