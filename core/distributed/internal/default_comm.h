// The communicator a distributed state-dict operation uses when its options name none:
// the MPI world, made once per process. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_DEFAULT_COMM_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_DEFAULT_COMM_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::internal {

// `given` when not null; else the MPI world communicator (MpiCommunicator::World(), kept
// for the life of the process; collective on first use). World's error, naming `op`, when
// it cannot be made (Unavailable in a build without MPI).
absl::StatusOr<Communicator*> ResolveCommunicator(Communicator* given, absl::string_view op);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_DEFAULT_COMM_H_
