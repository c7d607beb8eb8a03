#include "sdrt/comm/internal/mpi_check.h"

#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sdrt::internal {

absl::Status MpiStatus(int result, const char* call, const char* file, int line) {
  if (result == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(result, text, &length) != MPI_SUCCESS) length = 0;
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(result, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_UNKNOWN;
  const std::string message = absl::StrCat(call, " failed at ", file, ":", line, ": MPI error ",
                                           result, " (", std::string(text, length), ")");
  switch (error_class) {
    case MPI_ERR_ARG:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_COMM:
    case MPI_ERR_BUFFER:
      return absl::InvalidArgumentError(message);
    case MPI_ERR_NO_MEM:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<MPI_Comm> CommFromFortran(int64_t handle, absl::string_view op) {
  if (handle < std::numeric_limits<MPI_Fint>::min() ||
      handle > std::numeric_limits<MPI_Fint>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": Fortran communicator handle ", handle, " is outside MPI_Fint's range"));
  }
  const MPI_Fint fint = static_cast<MPI_Fint>(handle);
  if (fint == MPI_Comm_c2f(MPI_COMM_NULL)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": Fortran communicator handle ", handle, " is MPI_COMM_NULL"));
  }
#if defined(MPICH)
  // MPICH's handle layout (mpir_objects.h): bits 30-31 the handle kind (0 invalid,
  // 1 builtin, 2 direct, 3 indirect), bits 26-29 the object kind (1: a communicator).
  const uint32_t bits = static_cast<uint32_t>(fint);
  const uint32_t handle_kind = bits >> 30;
  const uint32_t object_kind = (bits >> 26) & 0xF;
  const bool builtin = fint == MPI_Comm_c2f(MPI_COMM_WORLD) || fint == MPI_Comm_c2f(MPI_COMM_SELF);
  if (object_kind != 1 || handle_kind == 0 || (handle_kind == 1 && !builtin)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: Fortran handle %d (%#010x) is not an MPI communicator: MPICH's object kind is "
        "%u (a communicator's is 1) and its handle kind %u (0 invalid, 1 builtin: only "
        "MPI_COMM_WORLD and MPI_COMM_SELF, 2 direct, 3 indirect)",
        op, handle, bits, object_kind, handle_kind));
  }
#endif
  return MPI_Comm_f2c(fint);
}

}  // namespace sdrt::internal
