#include "sdrt/comm/internal/mpi_check.h"

#include <string>

#include "absl/strings/str_cat.h"

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

}  // namespace sdrt::internal
