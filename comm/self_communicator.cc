#include "sdrt/comm/self_communicator.h"

#include <cstring>

namespace sdrt {

absl::Status SelfCommunicator::DoAllGather(void* output, const void* input,
                                           int64_t bytes_per_rank) {
  // In place (input == output) is a no-op; otherwise Communicator::AllGather has checked
  // that the two do not overlap.
  if (output != input) std::memcpy(output, input, static_cast<size_t>(bytes_per_rank));
  return absl::OkStatus();
}

absl::Status SelfCommunicator::DoAllGatherV(void* output, const void* input,
                                            absl::Span<const int64_t> byte_counts) {
  return DoAllGather(output, input, byte_counts[0]);
}

// One rank is its own root: its tensors already hold the root's values.
absl::Status SelfCommunicator::DoBroadcast(absl::Span<const Tensor> /*tensors*/, int /*root*/) {
  return absl::OkStatus();
}

// The reduction over one rank is the tensor itself, for every op (avg: divided by 1).
absl::Status SelfCommunicator::DoAllReduce(Tensor& /*tensor*/, ReduceOp /*op*/) {
  return absl::OkStatus();
}

absl::Status SelfCommunicator::DoBroadcastBytes(std::string* /*bytes*/, int /*root*/) {
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SelfCommunicator::DoAllGatherBytes(
    const std::string& mine) {
  return std::vector<std::string>{mine};
}

absl::StatusOr<std::unique_ptr<Communicator>> SelfCommunicator::DoSplit(int color, int /*key*/) {
  if (color < 0) return std::unique_ptr<Communicator>();
  return std::unique_ptr<Communicator>(new SelfCommunicator());
}

absl::Status SelfCommunicator::DoBarrier() { return absl::OkStatus(); }

absl::Status SelfCommunicator::DoExchange(absl::Span<const SendMessage> sends,
                                          absl::Span<const ReceiveMessage> receives,
                                          const LocalWork& overlap) {
  // Communicator::Exchange has paired them: same number, same sizes, in order.
  for (size_t i = 0; i < receives.size(); ++i) {
    if (receives[i].bytes > 0 && receives[i].data != sends[i].data) {
      std::memmove(receives[i].data, sends[i].data, static_cast<size_t>(receives[i].bytes));
    }
  }
  return overlap ? overlap() : absl::OkStatus();
}

}  // namespace sdrt
