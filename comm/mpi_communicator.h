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
// Deadlines: every collective is MPI's nonblocking form (MPI_Iallgather, MPI_Ibcast, ...)
// polled with MPI_Testall until it completes or timeout() passes since the call began
// (Communicator's "Deadlines"). The poll yields the core every 64 polls (returning at once
// when no other process is ready, so that a rank waiting beside ranks still working on the
// same cores does not take their time), and after 30 s sleeps 200 us between them, so a
// rank left waiting for a stopped peer does not hold a core for ten minutes.
// On expiry the ranks hold a roll call (comm/internal/mpi_roll_call.h) over a duplicate
// communicator kept for it, and every live rank returns DeadlineExceeded naming the op and
// the ranks that did not arrive, e.g. "all_gather (mpi, rank 0 of 3): not complete after
// 2000 ms; rank 1 did not arrive (ranks 0, 2 waited in collective #4)". A rank whose peer
// gave up first gives up as soon as it hears of it. Split and SplitShared first meet in a
// nonblocking barrier under the deadline, then split (MPI_Comm_split has no nonblocking
// form); communicators are duplicated with MPI_Comm_idup under the deadline.
//
// Ownership: the MPI communicator is freed by the destructor (unless MPI was already
// finalized, or the communicator timed out: then it is kept until the process ends, so that
// MPI does not give its context to a later communicator where a stopped rank that wakes up
// would be heard). This header does not include mpi.h. In a build without MPI the same header is
// served by comm/mpi_communicator_nompi.cc: World, Duplicate, DuplicateFortran, Accept and
// Connect return Unavailable, and AbortJob ends this process (the whole job) with the exit code.
#ifndef SDRT_COMM_MPI_COMMUNICATOR_H_
#define SDRT_COMM_MPI_COMMUNICATOR_H_

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

class MpiCommunicator final : public Communicator {
 public:
  // A communicator over all the processes of the job (a duplicate of MPI_COMM_WORLD);
  // collective over them. Initializes MPI (MPI_Init_thread asking for
  // MPI_THREAD_MULTIPLE, so that calls on two communicators may run on two threads at
  // once) unless the embedding program already did, in which case its initialization is
  // used as it is (below MPI_THREAD_MULTIPLE, no two threads may be in calls that use MPI
  // at once). When sdrt initialized MPI it also finalizes it, at
  // process exit (atexit). The communicator's timeout() is `timeout`, which also bounds
  // the duplication of MPI_COMM_WORLD (DeadlineExceeded when a rank never calls World).
  // FailedPrecondition when MPI was already finalized.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> World(
      std::chrono::milliseconds timeout = kDefaultTimeout);

  // A communicator over the ranks of the embedding program's `*mpi_comm` (an MPI_Comm, taken
  // by pointer so that this header does not include mpi.h), which is duplicated
  // (MPI_Comm_idup under `timeout`): the program keeps and frees its own. Collective over
  // its ranks. InvalidArgument for nullptr or MPI_COMM_NULL; FailedPrecondition when MPI is
  // not initialized or already finalized; DeadlineExceeded; MPI's error.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Duplicate(
      const void* mpi_comm, std::chrono::milliseconds timeout = kDefaultTimeout);
  // The same from MPI_Comm_c2f(comm), the portable integer handle (MPI_Fint). A value that
  // cannot be a communicator's is InvalidArgument naming it before MPI sees it: outside
  // MPI_Fint, MPI_COMM_NULL, or (under MPICH) without a communicator's handle bits.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> DuplicateFortran(
      int64_t fortran_handle, std::chrono::milliseconds timeout = kDefaultTimeout);

  // Two separately launched jobs (two `mpiexec`s: a trainer's and an engine's) joined into
  // one communicator through MPI's dynamic processes (MPI_Open_port, MPI_Comm_accept /
  // MPI_Comm_connect, MPI_Intercomm_merge). One job calls Accept and the other Connect with
  // the same `port_file`, a path both can reach (a shared folder across hosts). Each is
  // collective over its own job's MPI_COMM_WORLD and initializes MPI as World does. The
  // result spans both jobs, the accepting job's ranks first (ranks 0..A-1 in their
  // MPI_COMM_WORLD order, then the connecting job's), with timeout() `timeout`; freeing it
  // frees the link (the jobs may then meet again, e.g. a trainer accepting a restarted
  // engine). sdrt's own threads never call MPI.
  //
  // Accept: rank 0 takes a lock on `port_file`.lock (flock, dropped by the kernel however the
  // process ends; FailedPrecondition at once when another job holds it: one accepting job
  // per port file), opens a port and writes its name to `port_file` atomically (a temporary
  // file in the same folder, fsync, rename; InvalidArgument, before MPI is asked, when
  // `port_file` exists and is not a regular file; a symlink is never followed), waits for a
  // connector to claim it (Connect renames it to `port_file`.claimed), and only then enters
  // MPI_Comm_accept, which has no deadline of its own; it removes both names (and the lock
  // file it created) when done, on failure too, and nothing it did not write.
  // DeadlineExceeded naming `port_file` and the wait when nobody claims the port within
  // `timeout` (every rank gets it once rank 0 has removed the file: none is left when any rank
  // returns);
  // FailedPrecondition when `port_file`.claimed already exists (left by a job that died).
  // Connect: rank 0 polls for `port_file` until `timeout` passes (DeadlineExceeded naming it
  // and the wait), reads at most MPI_MAX_PORT_NAME bytes of it (InvalidArgument for a
  // symlink, a non-regular or larger file, or bytes that are not a port name), claims it,
  // and every rank calls MPI_Comm_connect with MPI's "timeout" info set to what is left of
  // `timeout` (MPICH's connect then fails with MPI_ERR_PORT, not exactly on time, if the
  // acceptor never accepts).
  //
  // Limits (docs/ARCHITECTURE.md, "Two jobs that meet"): the MPI library must implement dynamic
  // processes (MPICH 5's ch4:ofi does, docs/HOSTS.md; MPICH 4.0's ch4:ucx netmod, Debian 12's, does
  // not: MPI_Open_port and MPI_Comm_connect fail with "The function is currently not supported with
  // ucx netmod", returned as MPI's error); a connector that dies between its claim and its connect
  // (or fails in its own MPI) leaves the acceptor blocked in MPI_Comm_accept; a connect to a live
  // acceptor that is not accepting waits until that process ends; a peer killed while bytes are
  // in flight can make MPICH abort this job (docs/ARCHITECTURE.md, "What MPICH does not let sdrt
  // bound"). Unavailable in a build without MPI.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Accept(
      const std::string& port_file, std::chrono::milliseconds timeout = kDefaultTimeout);
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Connect(
      const std::string& port_file, std::chrono::milliseconds timeout = kDefaultTimeout);

  // Ends every process of the MPI job, this one included, with exit status `exit_code`
  // (MPI_Abort on MPI_COMM_WORLD; mpiexec kills the other ranks, a stopped one too). What a
  // program that owns the job does after a DeadlineExceeded, so that nothing is left
  // running: `sdrt` does. Flushes stdout and stderr and waits 300 ms first: mpiexec ends
  // the job on the first abort it hears of, before forwarding what the other live ranks
  // printed about the same fault (seen: both live ranks' errors lost). A library embedded
  // in someone else's job should return the error instead. Does not return.
  [[noreturn]] static void AbortJob(int exit_code);

  ~MpiCommunicator() override;

  // This communicator's ranks on this node (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED;
  // ordered as here): its rank() is this process's node-local rank and its size() the
  // number of ranks on this node, by which a launcher gives each process its own GPU
  // (torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE). Collective over this communicator, under
  // its timeout() (inherited by the result). MPI's error as a Status.
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> SplitShared();

  absl::string_view backend() const override { return "mpi"; }
  bool SupportsExchange() const override { return true; }
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
  // comm/mpi_exchange.cc.
  absl::Status DoExchange(absl::Span<const SendMessage> sends,
                          absl::Span<const ReceiveMessage> receives,
                          const LocalWork& overlap) override;

 private:
  // Handle is MPI_Comm, stored as an integer-sized opaque value so mpi.h stays private:
  // MPICH's MPI_Comm is an int, Open MPI's a pointer; the .cc static_asserts the fit.
  using Handle = intptr_t;
  using Clock = std::chrono::steady_clock;
  MpiCommunicator(Handle comm, Handle roll_comm, int rank, int size,
                  std::chrono::milliseconds timeout);

  // A communicator over `comm` (adopted: freed with the object, also on error), with its
  // roll-call duplicate made under `timeout`.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Adopt(Handle comm,
                                                                std::chrono::milliseconds timeout);
  // The merged communicator of Accept (`accepting`) or Connect over the intercommunicator
  // `inter` (freed here): comm/mpi_connect.cc.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Merge(Handle inter, bool accepting,
                                                                std::chrono::milliseconds timeout);
  // Splits with MPI_Comm_split (color < 0: MPI_UNDEFINED) or, when `shared`, with
  // MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), after a barrier under the deadline; nullptr
  // for a rank in no group.
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> SplitComm(absl::string_view op, bool shared,
                                                            int color, int key);

  // Starts the collective `op`: FailedPrecondition once the communicator timed out,
  // otherwise counts it and starts its deadline.
  absl::Status Begin(absl::string_view op);
  // Waits for `count` MPI requests (MPI_Request*) of `op` until they complete or the
  // deadline started by Begin passes; then the roll call, and DeadlineExceeded.
  absl::Status Await(absl::string_view op, void* requests, int count);

  // `bytes` bytes at `data` that rank `root` broadcasts.
  struct Piece {
    void* data;
    int64_t bytes;
    int root;
  };
  // Broadcasts every piece, in order, as nonblocking messages of at most
  // max_message_bytes() each, then waits for all of them (one grouped operation).
  absl::Status BroadcastPieces(absl::string_view op, const std::vector<Piece>& pieces);
  // The all-gathers of DoAllGather and DoAllGatherV, inside a collective begun by the
  // caller.
  absl::Status GatherEqual(absl::string_view op, void* output, const void* input,
                           int64_t bytes_per_rank);
  absl::Status GatherV(absl::string_view op, void* output, const void* input,
                       absl::Span<const int64_t> byte_counts);

  Handle comm_;
  Handle roll_comm_;  // the roll call's duplicate; MPI_COMM_NULL for one rank
  int64_t max_message_bytes_ = INT_MAX;
  int64_t sequence_ = 0;             // collectives begun
  Clock::time_point deadline_;       // of the collective in progress
  std::string timed_out_;            // the DeadlineExceeded message; empty while usable
};

}  // namespace sdrt

#endif  // SDRT_COMM_MPI_COMMUNICATOR_H_
