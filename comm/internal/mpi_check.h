// The MPI check macro, the twin of cuda/cuda_check.h and comm/internal/nccl_check.h: an MPI return
// code becomes an absl::Status carrying the call text, file:line and MPI's own error
// string. Internal to comm/ (it includes mpi.h); only built with MPI. The MPI
// backend sets MPI_ERRORS_RETURN on its communicators, so errors come back here instead of
// aborting the job; a program's Fortran communicator handle is checked here before MPI
// sees it.
//
//   SDRT_MPI_RETURN_IF_ERROR(MPI_Bcast(data, count, MPI_BYTE, root, comm));
#ifndef SDRT_COMM_INTERNAL_MPI_CHECK_H_
#define SDRT_COMM_INTERNAL_MPI_CHECK_H_

#include <mpi.h>

#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sdrt::internal {

// OK for MPI_SUCCESS; otherwise a Status describing `call` at file:line. The code maps
// MPI_ERR_ARG, MPI_ERR_COUNT, MPI_ERR_TYPE, MPI_ERR_OP, MPI_ERR_ROOT, MPI_ERR_COMM and
// MPI_ERR_BUFFER to InvalidArgument, MPI_ERR_NO_MEM to ResourceExhausted, everything else
// to Internal.
absl::Status MpiStatus(int result, const char* call, const char* file, int line);

// The MPI_Comm of `handle`, a program's MPI_Comm_c2f value, for `op`. InvalidArgument naming
// the value when it is outside MPI_Fint, MPI_COMM_NULL, or, under MPICH (whose
// MPI_Comm_f2c is a cast, and which aborts or crashes on a foreign handle), when its bits
// are not those of a communicator: MPICH's object kind must be a communicator's and the
// handle kind direct, indirect, or builtin for MPI_COMM_WORLD and MPI_COMM_SELF only (a
// handle with those bits that the program freed still reaches MPI). Needs MPI initialized.
absl::StatusOr<MPI_Comm> CommFromFortran(int64_t handle, absl::string_view op);

// MpiCommunicator keeps its MPI_Comm as an integer-sized opaque handle (MPICH's MPI_Comm is
// an int, Open MPI's a pointer), so that mpi.h stays out of its public header.
static_assert(sizeof(MPI_Comm) <= sizeof(intptr_t), "MPI_Comm must fit the opaque handle");
inline MPI_Comm ToComm(intptr_t handle) {
  MPI_Comm comm;
  std::memcpy(&comm, &handle, sizeof(comm));
  return comm;
}
inline intptr_t ToHandle(MPI_Comm comm) {
  intptr_t handle = 0;
  std::memcpy(&handle, &comm, sizeof(comm));
  return handle;
}

}  // namespace sdrt::internal

#define SDRT_MPI_STATUS(expr) ::sdrt::internal::MpiStatus((expr), #expr, __FILE__, __LINE__)

#define SDRT_MPI_RETURN_IF_ERROR(expr)                       \
  do {                                                       \
    ::absl::Status sdrt_mpi_status_ = SDRT_MPI_STATUS(expr); \
    if (!sdrt_mpi_status_.ok()) return sdrt_mpi_status_;     \
  } while (0)

#endif  // SDRT_COMM_INTERNAL_MPI_CHECK_H_
