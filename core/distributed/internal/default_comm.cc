#include "sdrt/core/distributed/internal/default_comm.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/mpi_communicator.h"

namespace sdrt::internal {

absl::StatusOr<Communicator*> ResolveCommunicator(Communicator* given, absl::string_view op) {
  if (given != nullptr) return given;
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>>* world =
      new absl::StatusOr<std::unique_ptr<MpiCommunicator>>(MpiCommunicator::World());
  if (!world->ok()) {
    return absl::Status(world->status().code(),
                        absl::StrCat(op, ": no communicator given and no MPI world (",
                                     world->status().message(), ")"));
  }
  return world->value().get();
}

}  // namespace sdrt::internal
