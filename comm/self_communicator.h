// SelfCommunicator: the communicator of a group of one process (rank 0 of 1) for CPU
// tensors, without MPI: what an MpiCommunicator of one rank does, with no library
// underneath. Every collective is local and leaves the ranks' data as MPI would with one
// rank: AllGather and AllGatherV copy the input into the output (nothing when in place),
// Broadcast, AllReduce (every op; avg divides by 1) and BroadcastBytes leave the data as
// it is, AllGatherBytes returns {mine}, Barrier returns at once, Split gives a new
// SelfCommunicator (nullptr for a negative color). Arguments are validated as for any
// Communicator (comm/communicator.h), so a call that would fail on a real backend fails
// here too.
//
// Use: the CPU communicator of a one-process ProcessGroup beside a one-rank NCCL
// communicator (comm/process_group.h), e.g. the `sdrt` commands' session in a build
// without MPI (tools/sdrt/internal/session.h), or an engine's single-process run. Built
// in every configuration (no backend needed). Thread-safety as Communicator.
#ifndef SDRT_COMM_SELF_COMMUNICATOR_H_
#define SDRT_COMM_SELF_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "sdrt/comm/communicator.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator() : Communicator(/*rank=*/0, /*size=*/1) {}

  absl::string_view backend() const override { return "self"; }
  bool SupportsExchange() const override { return true; }
  Device device() const override { return Device::CPU(); }

 protected:
  absl::Status DoAllGather(void* output, const void* input, int64_t bytes_per_rank) override;
  absl::Status DoAllGatherV(void* output, const void* input,
                            absl::Span<const int64_t> byte_counts) override;
  absl::Status DoBroadcast(absl::Span<const Tensor> tensors, int root) override;
  absl::Status DoAllReduce(Tensor& tensor, ReduceOp op) override;
  absl::Status DoBroadcastBytes(std::string* bytes, int root) override;
  absl::StatusOr<std::vector<std::string>> DoAllGatherBytes(const std::string& mine) override;
  absl::StatusOr<std::unique_ptr<Communicator>> DoSplit(int color, int key) override;
  absl::Status DoBarrier() override;
  // Every message is to self: the k-th send is copied into the k-th receive.
  absl::Status DoExchange(absl::Span<const SendMessage> sends,
                          absl::Span<const ReceiveMessage> receives,
                          const LocalWork& overlap) override;
};

}  // namespace sdrt

#endif  // SDRT_COMM_SELF_COMMUNICATOR_H_
