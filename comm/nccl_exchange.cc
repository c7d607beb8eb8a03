// NcclCommunicator::DoExchange (comm/communicator.h, Exchange): every receive and send as
// ncclRecv / ncclSend of bytes inside one ncclGroupStart / ncclGroupEnd on the
// communicator's stream, then a wait under the call's deadline. NCCL keeps the messages
// between two ranks of one group in order, which is the pairing Exchange promises; a send
// to self pairs with the receive from self inside the group. Buffers are device memory of
// the communicator's GPU (the CPU staging of the collectives is not offered here). And
// DoSynchronize: the same wait for whatever the caller enqueued on the stream.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "sdrt/comm/internal/nccl_check.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/cuda/device_guard.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

absl::Status NcclCommunicator::DoExchange(absl::Span<const SendMessage> sends,
                                          absl::Span<const ReceiveMessage> receives,
                                          const LocalWork& overlap) {
  constexpr absl::string_view kOp = "exchange";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  const Clock::time_point deadline = Deadline();
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  const auto comm = static_cast<ncclComm_t>(comm_);
  const auto stream = static_cast<cudaStream_t>(stream_);
  SDRT_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status enqueued;
  for (size_t i = 0; i < receives.size() && enqueued.ok(); ++i) {
    const ReceiveMessage& m = receives[i];
    if (m.bytes == 0) continue;
    enqueued = SDRT_NCCL_STATUS(
        ncclRecv(m.data, static_cast<size_t>(m.bytes), ncclUint8, m.peer, comm, stream));
  }
  for (size_t i = 0; i < sends.size() && enqueued.ok(); ++i) {
    const SendMessage& m = sends[i];
    if (m.bytes == 0) continue;
    enqueued = SDRT_NCCL_STATUS(
        ncclSend(m.data, static_cast<size_t>(m.bytes), ncclUint8, m.peer, comm, stream));
  }
  const ncclResult_t ended = ncclGroupEnd();
  if (!enqueued.ok()) {
    Abort();
    return internal::AbortedBy(Where(kOp), enqueued);
  }
  SDRT_RETURN_IF_ERROR(Settle(kOp, ended, "ncclGroupEnd", deadline));
  // The messages are on the stream; the local work runs while they move.
  const absl::Status local = overlap ? overlap() : absl::OkStatus();
  SDRT_RETURN_IF_ERROR(Wait(kOp, deadline));
  return local;
}

absl::Status NcclCommunicator::DoSynchronize() {
  constexpr absl::string_view kOp = "synchronize";
  SDRT_RETURN_IF_ERROR(CheckUsable(kOp));
  internal::DeviceGuard guard;
  SDRT_RETURN_IF_ERROR(guard.Enter(device_));
  return Wait(kOp, Deadline());
}

}  // namespace sdrt
