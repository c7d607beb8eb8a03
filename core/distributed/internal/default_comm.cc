#include "sdrt/core/distributed/internal/default_comm.h"

#include <memory>

#include "absl/strings/str_cat.h"
#if SDRT_HAVE_MPI
#include "sdrt/comm/mpi_communicator.h"
#endif

namespace sdrt::internal {

absl::StatusOr<Communicator*> ResolveCommunicator(Communicator* given, absl::string_view op) {
  if (given != nullptr) return given;
#if SDRT_HAVE_MPI
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>>* world =
      new absl::StatusOr<std::unique_ptr<MpiCommunicator>>(MpiCommunicator::World());
  if (!world->ok()) return world->status();
  return world->value().get();
#else
  return absl::FailedPreconditionError(
      absl::StrCat(op, ": no communicator given and sdrt was built without MPI"));
#endif
}

}  // namespace sdrt::internal
