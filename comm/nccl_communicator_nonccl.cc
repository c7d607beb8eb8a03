// Build without NCCL: the public API of comm/nccl_communicator.h exists so that callers
// compile and link unchanged, and every way to make an NcclCommunicator (or an
// NcclUniqueId) says so with absl::UnavailableError. No NcclCommunicator object can exist
// in such a build; the virtual functions below are defined only because the class's
// vtable needs them.
#include "absl/strings/str_cat.h"
#include "sdrt/comm/nccl_communicator.h"

namespace sdrt {
namespace {

absl::Status NoNccl(absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": sdrt was built without NCCL"));
}

}  // namespace

absl::StatusOr<NcclUniqueId> NcclUniqueId::Generate() { return NoNccl("NcclUniqueId::Generate"); }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(int, int, int,
                                                                           const NcclUniqueId&,
                                                                           Options) {
  return NoNccl("NcclCommunicator::Create");
}
absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateFromCommunicator(
    Communicator&, int, Options) {
  return NoNccl("NcclCommunicator::CreateFromCommunicator");
}
absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Adopt(void*, int, int, int,
                                                                          AdoptOptions) {
  return NoNccl("NcclCommunicator::Adopt");
}

NcclCommunicator::~NcclCommunicator() = default;
absl::Status NcclCommunicator::DoAllGather(void*, const void*, int64_t) {
  return NoNccl("all_gather");
}
absl::Status NcclCommunicator::DoAllGatherV(void*, const void*, absl::Span<const int64_t>) {
  return NoNccl("all_gather_v");
}
absl::Status NcclCommunicator::DoBroadcast(absl::Span<const Tensor>, int) {
  return NoNccl("broadcast");
}
absl::Status NcclCommunicator::DoAllReduce(Tensor&, ReduceOp) { return NoNccl("all_reduce"); }
absl::Status NcclCommunicator::DoBroadcastBytes(std::string*, int) {
  return NoNccl("broadcast_bytes");
}
absl::StatusOr<std::vector<std::string>> NcclCommunicator::DoAllGatherBytes(const std::string&) {
  return NoNccl("all_gather_bytes");
}
absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::DoSplit(int, int) {
  return NoNccl("split");
}
absl::Status NcclCommunicator::DoBarrier() { return NoNccl("barrier"); }
absl::Status NcclCommunicator::DoExchange(absl::Span<const SendMessage>,
                                          absl::Span<const ReceiveMessage>, const LocalWork&) {
  return NoNccl("exchange");
}
absl::Status NcclCommunicator::DoSynchronize() { return NoNccl("synchronize"); }

}  // namespace sdrt
