// MpiCommunicator: the MPI backend of Communicator (MPICH), for CPU tensors and for the
// bootstrap of everything else (NCCL unique ids, metadata). Processes are started by
// `mpiexec -n N`.
//
// Data moves as MPI_BYTE (the element type does not matter to a copy); only reductions use
// typed MPI datatypes, and float16/bfloat16 reductions a user-defined MPI_Op that combines
// in float32. MPI counts are int, so any transfer larger than max_message_bytes()
// (INT_MAX by default) is split into several messages. Each MpiCommunicator owns its own
// MPI communicator (a duplicate or a split), with MPI_ERRORS_RETURN set, so sdrt's traffic
// never matches the embedding program's and MPI errors come back as a Status.
//
// Ownership: the MPI communicator is freed by the destructor (unless MPI was already
// finalized). This header does not include mpi.h.
#ifndef SDRT_COMM_MPI_COMMUNICATOR_H_
#define SDRT_COMM_MPI_COMMUNICATOR_H_

#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"

namespace sdrt {

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over all the processes of the job (a duplicate of MPI_COMM_WORLD);
  // collective over them. Initializes MPI (MPI_Init_thread asking for
  // MPI_THREAD_SERIALIZED) unless the embedding program already did, in which case its
  // initialization is used as it is. When sdrt initialized MPI it also finalizes it, at
  // process exit (atexit). FailedPrecondition when MPI was already finalized.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> World();

  ~MpiCommunicator() override;

  // This communicator's ranks on this node (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED;
  // ordered as here): its rank() is this process's node-local rank and its size() the
  // number of ranks on this node, by which a launcher gives each process its own GPU
  // (torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE). Collective over this communicator.
  // MPI's error as a Status.
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> SplitShared();

  absl::string_view backend() const override { return "mpi"; }
  Device device() const override { return Device::CPU(); }

  // The largest single MPI message, in bytes (default INT_MAX, MPI's count limit); larger
  // transfers are split. Tests lower it to exercise the splitting. Must be >= 1 and the
  // same on every rank.
  int64_t max_message_bytes() const { return max_message_bytes_; }
  void set_max_message_bytes(int64_t bytes) { max_message_bytes_ = bytes; }

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

 private:
  // Handle is MPI_Comm, stored as an integer-sized opaque value so mpi.h stays private:
  // MPICH's MPI_Comm is an int, Open MPI's a pointer; the .cc static_asserts the fit.
  using Handle = intptr_t;
  MpiCommunicator(Handle comm, int rank, int size);

  // `bytes` bytes at `data` that rank `root` broadcasts.
  struct Piece {
    void* data;
    int64_t bytes;
    int root;
  };
  // Broadcasts every piece, in order, as nonblocking messages of at most
  // max_message_bytes() each, then waits for all of them (one grouped operation).
  absl::Status BroadcastPieces(const std::vector<Piece>& pieces);

  Handle comm_;
  int64_t max_message_bytes_ = INT_MAX;
};

}  // namespace sdrt

#endif  // SDRT_COMM_MPI_COMMUNICATOR_H_
