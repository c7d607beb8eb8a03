// Build without MPI: the public API of comm/mpi_communicator.h exists so that callers
// compile and link unchanged, and every way to make an MpiCommunicator says so with
// absl::UnavailableError. No MpiCommunicator object can exist in such a build; the
// virtual functions below are defined only because the class's vtable needs them.
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "sdrt/comm/mpi_communicator.h"

namespace sdrt {
namespace {

absl::Status NoMpi(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": sdrt was built without MPI"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::World(std::chrono::milliseconds) {
  return NoMpi("MpiCommunicator::World");
}
absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Duplicate(
    const void*, std::chrono::milliseconds) {
  return NoMpi("MpiCommunicator::Duplicate");
}
absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::DuplicateFortran(
    int64_t, std::chrono::milliseconds) {
  return NoMpi("MpiCommunicator::DuplicateFortran");
}
absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Accept(
    const std::string&, std::chrono::milliseconds) {
  return NoMpi("MpiCommunicator::Accept");
}
absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Connect(
    const std::string&, std::chrono::milliseconds) {
  return NoMpi("MpiCommunicator::Connect");
}
// Without MPI the job is this process.
void MpiCommunicator::AbortJob(int exit_code) { std::_Exit(exit_code); }

MpiCommunicator::~MpiCommunicator() = default;
absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::SplitShared() {
  return NoMpi("MpiCommunicator::SplitShared");
}
absl::Status MpiCommunicator::DoAllGather(void*, const void*, int64_t) {
  return NoMpi("all_gather");
}
absl::Status MpiCommunicator::DoAllGatherV(void*, const void*, absl::Span<const int64_t>) {
  return NoMpi("all_gather_v");
}
absl::Status MpiCommunicator::DoBroadcast(absl::Span<const Tensor>, int) {
  return NoMpi("broadcast");
}
absl::Status MpiCommunicator::DoAllReduce(Tensor&, ReduceOp) { return NoMpi("all_reduce"); }
absl::Status MpiCommunicator::DoBroadcastBytes(std::string*, int) {
  return NoMpi("broadcast_bytes");
}
absl::StatusOr<std::vector<std::string>> MpiCommunicator::DoAllGatherBytes(const std::string&) {
  return NoMpi("all_gather_bytes");
}
absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::DoSplit(int, int) {
  return NoMpi("split");
}
absl::Status MpiCommunicator::DoBarrier() { return NoMpi("barrier"); }
absl::Status MpiCommunicator::DoExchange(absl::Span<const SendMessage>,
                                         absl::Span<const ReceiveMessage>, const LocalWork&) {
  return NoMpi("exchange");
}

}  // namespace sdrt
