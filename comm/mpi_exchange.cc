// MpiCommunicator::DoExchange (comm/communicator.h, Exchange): every receive and send posted
// as MPI_Irecv / MPI_Isend on one tag, then one wait under the call's deadline. MPI keeps
// the messages between two ranks on one (communicator, tag) in order, which is the pairing
// Exchange promises. A message above 1 GiB goes as 1 GiB pieces, which both sides cut
// alike since the paired messages have the same size. The requests of an exchange of up
// to kInlineRequests messages live on the stack: a weight sync's every step (a bound
// reshard's exchanges) allocates nothing here.
#include <mpi.h>

#include <algorithm>
#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "sdrt/comm/internal/mpi_check.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

constexpr int kExchangeTag = 4711;
constexpr int64_t kPieceBytes = int64_t{1} << 30;
constexpr size_t kInlineRequests = 64;  // receives and sends from and to 32 peers

int64_t Pieces(int64_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }

}  // namespace

absl::Status MpiCommunicator::DoExchange(absl::Span<const SendMessage> sends,
                                         absl::Span<const ReceiveMessage> receives,
                                         const LocalWork& overlap) {
  constexpr absl::string_view kOp = "exchange";
  SDRT_RETURN_IF_ERROR(Begin(kOp));
  const MPI_Comm comm = internal::ToComm(comm_);
  int64_t count = 0;
  for (const SendMessage& m : sends) count += Pieces(m.bytes);
  for (const ReceiveMessage& m : receives) count += Pieces(m.bytes);
  absl::InlinedVector<MPI_Request, kInlineRequests> requests;
  requests.reserve(static_cast<size_t>(count));
  // Receives first, so that no send waits for its receive to be posted.
  for (const ReceiveMessage& m : receives) {
    for (int64_t at = 0; at < m.bytes; at += kPieceBytes) {
      const int n = static_cast<int>(std::min(kPieceBytes, m.bytes - at));
      requests.emplace_back();
      SDRT_MPI_RETURN_IF_ERROR(MPI_Irecv(static_cast<char*>(m.data) + at, n, MPI_BYTE, m.peer,
                                         kExchangeTag, comm, &requests.back()));
    }
  }
  for (const SendMessage& m : sends) {
    for (int64_t at = 0; at < m.bytes; at += kPieceBytes) {
      const int n = static_cast<int>(std::min(kPieceBytes, m.bytes - at));
      requests.emplace_back();
      SDRT_MPI_RETURN_IF_ERROR(MPI_Isend(static_cast<const char*>(m.data) + at, n, MPI_BYTE, m.peer,
                                         kExchangeTag, comm, &requests.back()));
    }
  }
  // The local work runs while MPI moves the messages (a peer pulling from this rank's
  // buffers needs nothing of this thread); the messages are waited for whatever it gives.
  const absl::Status local = overlap ? overlap() : absl::OkStatus();
  SDRT_RETURN_IF_ERROR(Await(kOp, requests.data(), static_cast<int>(requests.size())));
  return local;
}

}  // namespace sdrt
