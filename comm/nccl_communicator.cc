#include "sdrt/comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/internal/nccl_check.h"
#include "sdrt/comm/internal/nccl_types.h"
#include "sdrt/cuda/cuda_check.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

static_assert(NcclUniqueId::kBytes == NCCL_UNIQUE_ID_BYTES, "NcclUniqueId must match NCCL's");
static_assert(sizeof(ncclUniqueId) == NcclUniqueId::kBytes, "NcclUniqueId must match NCCL's");

constexpr std::chrono::microseconds kPollInterval(100);

ncclComm_t ToComm(void* comm) { return static_cast<ncclComm_t>(comm); }
cudaStream_t ToStream(StreamHandle stream) { return static_cast<cudaStream_t>(stream); }

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

// Copies a staged result back into the CPU tensor it came from (no-op for device tensors).
absl::Status CopyBack(const Tensor& original, const Tensor& staged, StreamHandle stream) {
  if (!original.device().is_cpu()) return absl::OkStatus();
  Tensor destination = original;
  return destination.CopyFrom(staged, /*non_blocking=*/false, stream);
}

}  // namespace

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
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NcclCommunicator::Create: rank ", rank, " is not in [0, size = ", size, ")"));
  }
  const int device_count = CudaDeviceCount();
  if (device < 0 || device >= device_count) {
    return absl::InvalidArgumentError(absl::StrCat("NcclCommunicator::Create (rank ", rank, " of ",
                                                   size, "): device ", device, " is not in [0, ",
                                                   device_count, ") (the visible CUDA devices)"));
  }
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
  ncclComm_t comm = nullptr;
  SDRT_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, nccl_id, rank));
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
  // Every rank learns whether every device is usable before any rank enters
  // ncclCommInitRank, so a bad device on one rank is an error everywhere, not a hang.
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

NcclCommunicator::NcclCommunicator(void* comm, int rank, int size, int device,
                                   std::optional<CudaStream> owned, StreamHandle stream,
                                   std::chrono::milliseconds timeout)
    : Communicator(rank, size),
      comm_(comm),
      device_(device),
      owned_stream_(std::move(owned)),
      stream_(stream),
      timeout_(timeout) {}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  internal::DeviceGuard guard;
  if (guard.Enter(device_).ok()) (void)ncclCommDestroy(ToComm(comm_));
}

absl::Status NcclCommunicator::CheckUsable(absl::string_view op) const {
  if (comm_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      Where(op), ": the NCCL communicator was aborted by an earlier error or timeout"));
}

void NcclCommunicator::Abort() {
  if (comm_ == nullptr) return;
  (void)ncclCommAbort(ToComm(comm_));
  comm_ = nullptr;
}

absl::Status NcclCommunicator::Wait(absl::string_view op) {
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    const cudaError_t done = cudaStreamQuery(ToStream(stream_));
    if (done == cudaSuccess) return absl::OkStatus();
    if (done != cudaErrorNotReady) {
      absl::Status error = SDRT_CUDA_STATUS(done);
      Abort();
      return Prefixed(Where(op), error);
    }
    ncclResult_t async_error = ncclSuccess;
    absl::Status query = SDRT_NCCL_STATUS(ncclCommGetAsyncError(ToComm(comm_), &async_error));
    if (query.ok() && async_error != ncclSuccess && async_error != ncclInProgress) {
      query = internal::NcclStatus(async_error, "ncclCommGetAsyncError", __FILE__, __LINE__);
    }
    if (!query.ok()) {
      Abort();
      return Prefixed(Where(op), query);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Abort();
      return absl::DeadlineExceededError(absl::StrCat(
          Where(op), ": not complete after ", timeout_.count(),
          " ms; the NCCL communicator was aborted (is a rank missing from the collective?)"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

absl::Status NcclCommunicator::Gather(absl::string_view op, void* output, const void* input,
                                      absl::Span<const int64_t> byte_counts) {
  SDRT_RETURN_IF_ERROR(CheckUsable(op));
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
  // Staging buffers for host memory, freed after the wait.
  DeviceBuffer out_buffer;
  DeviceBuffer in_buffer;
  char* device_out = out;
  if (out_host) {
    SDRT_ASSIGN_OR_RETURN(out_buffer, AllocateDeviceBuffer(total, device_));
    device_out = static_cast<char*>(out_buffer->data());
  }
  const char* device_in = static_cast<const char*>(input);
  if (in_place) {
    device_in = device_out + offsets[rank()];
  } else if (in_host) {
    SDRT_ASSIGN_OR_RETURN(in_buffer, AllocateDeviceBuffer(mine, device_));
    device_in = static_cast<const char*>(in_buffer->data());
  }
  const cudaStream_t stream = ToStream(stream_);
  if (in_host) {
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(const_cast<char*>(device_in), input, mine, cudaMemcpyHostToDevice, stream));
  }
  const ncclComm_t comm = ToComm(comm_);
  if (even) {
    SDRT_NCCL_RETURN_IF_ERROR(ncclAllGather(device_in, device_out, mine, ncclUint8, comm, stream));
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
    const absl::Status ended = SDRT_NCCL_STATUS(ncclGroupEnd());
    SDRT_RETURN_IF_ERROR(enqueued);
    SDRT_RETURN_IF_ERROR(ended);
  }
  SDRT_RETURN_IF_ERROR(Wait(op));
  if (!out_host) return absl::OkStatus();
  // Copied back only after the wait: a copy into pageable memory may block the host until
  // the collective ends, which would bypass the watchdog.
  SDRT_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(output, device_out, total, cudaMemcpyDeviceToHost, stream));
  return Wait(op);
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
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  std::vector<Tensor> staged;
  staged.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    SDRT_ASSIGN_OR_RETURN(Tensor on_device, t.To(device(), /*non_blocking=*/false, stream_));
    staged.push_back(std::move(on_device));
  }
  SDRT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status enqueued;
  for (size_t i = 0; i < staged.size() && enqueued.ok(); ++i) {
    void* data = staged[i].data_ptr();
    enqueued = SDRT_NCCL_STATUS(ncclBroadcast(data, data, staged[i].nbytes(), ncclUint8, root,
                                              ToComm(comm_), ToStream(stream_)));
  }
  const absl::Status ended = SDRT_NCCL_STATUS(ncclGroupEnd());
  SDRT_RETURN_IF_ERROR(enqueued);
  SDRT_RETURN_IF_ERROR(ended);
  SDRT_RETURN_IF_ERROR(Wait(kOp));
  for (size_t i = 0; i < staged.size(); ++i) {
    SDRT_RETURN_IF_ERROR(CopyBack(tensors[i], staged[i], stream_));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::DoAllReduce(Tensor& tensor, ReduceOp op) {
  constexpr absl::string_view kOp = "all_reduce";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const int datatype = internal::NcclDataType(tensor.dtype());
  if (datatype == ncclNumTypes) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(kOp), ": NCCL cannot reduce ", DTypeName(tensor.dtype()), " (as ProcessGroupNCCL)"));
  }
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  SDRT_ASSIGN_OR_RETURN(Tensor staged, tensor.To(device(), /*non_blocking=*/false, stream_));
  void* data = staged.data_ptr();
  SDRT_NCCL_RETURN_IF_ERROR(
      ncclAllReduce(data, data, staged.numel(), static_cast<ncclDataType_t>(datatype),
                    static_cast<ncclRedOp_t>(internal::NcclReduceOp(tensor.dtype(), op)),
                    ToComm(comm_), ToStream(stream_)));
  SDRT_RETURN_IF_ERROR(Wait(kOp));
  return CopyBack(tensor, staged, stream_);
}

absl::Status NcclCommunicator::BroadcastHost(absl::string_view op, void* data, int64_t bytes,
                                             int root) {
  SDRT_RETURN_IF_ERROR(CheckUsable(op));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  SDRT_ASSIGN_OR_RETURN(DeviceBuffer buffer, AllocateDeviceBuffer(bytes, device_));
  void* staging = buffer->data();
  const cudaStream_t stream = ToStream(stream_);
  if (rank() == root) {
    SDRT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(staging, data, bytes, cudaMemcpyHostToDevice, stream));
  }
  SDRT_NCCL_RETURN_IF_ERROR(
      ncclBroadcast(staging, staging, bytes, ncclUint8, root, ToComm(comm_), stream));
  SDRT_RETURN_IF_ERROR(Wait(op));  // before the copy back, as in Gather
  SDRT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data, staging, bytes, cudaMemcpyDeviceToHost, stream));
  return Wait(op);
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
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  ncclComm_t child = nullptr;
  if (absl::Status s = SDRT_NCCL_STATUS(ncclCommSplit(
          ToComm(comm_), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
      !s.ok()) {
    return Prefixed(Where(kOp), s);
  }
  if (child == nullptr) return std::unique_ptr<Communicator>();
  int child_rank = 0;
  int child_size = 0;
  absl::Status s = SDRT_NCCL_STATUS(ncclCommUserRank(child, &child_rank));
  if (s.ok()) s = SDRT_NCCL_STATUS(ncclCommCount(child, &child_size));
  absl::StatusOr<CudaStream> stream = CudaStream::Create(device_);
  if (s.ok()) s = stream.status();
  if (!s.ok()) {
    (void)ncclCommDestroy(child);
    return Prefixed(Where(kOp), s);
  }
  std::optional<CudaStream> owned(std::move(*stream));
  const StreamHandle handle = owned->handle();
  return std::unique_ptr<Communicator>(new NcclCommunicator(child, child_rank, child_size, device_,
                                                            std::move(owned), handle, timeout_));
}

absl::Status NcclCommunicator::DoBarrier() {
  constexpr absl::string_view kOp = "barrier";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  SDRT_ASSIGN_OR_RETURN(DeviceBuffer buffer, AllocateDeviceBuffer(sizeof(int32_t), device_));
  void* one = buffer->data();
  const cudaStream_t stream = ToStream(stream_);
  SDRT_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(one, 0, sizeof(int32_t), stream));
  SDRT_NCCL_RETURN_IF_ERROR(ncclAllReduce(one, one, 1, ncclInt32, ncclSum, ToComm(comm_), stream));
  return Wait(kOp);
}

}  // namespace sdrt
