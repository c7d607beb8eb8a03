// The roll call of the MPI backend: how ranks whose collective passed its deadline find out
// which ranks never arrived, so that the DeadlineExceeded every live rank returns names
// them (docs/SEMANTICS.md 11.16). Internal to comm/ (it includes mpi.h).
//
// Each MpiCommunicator owns a second MPI communicator over the same ranks (a duplicate),
// used only for these messages, so they never match a collective's. A message is one
// int64, a sequence number: the sender's count of collectives on the communicator, the
// same on every rank for the same collective because every rank makes the same calls in
// the same order; its tag says whether it is a call or a reply.
//   - A rank whose deadline passes sends a call carrying its sequence number to every
//     other rank, then for a grace period collects replies.
//   - A rank that is waiting in a collective (or in its own roll call) answers every call
//     it finds with a reply carrying the sequence number of the collective it waits in. A call also tells
//     it that a peer gave up, so it gives up too (the collective can no longer complete
//     on every rank) instead of waiting out its own deadline.
// A rank that is stopped, wedged outside sdrt or dead answers nothing: it "did not arrive".
#ifndef SDRT_COMM_INTERNAL_MPI_ROLL_CALL_H_
#define SDRT_COMM_INTERNAL_MPI_ROLL_CALL_H_

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sdrt::internal {

// What one rank learned from its roll call, in rank order.
struct RollCallResult {
  std::vector<int> absent;                         // no reply within the grace period
  std::vector<std::pair<int, int64_t>> elsewhere;  // (rank, its collective) when another
  std::vector<int> present;                        // replied from this collective; and us
  int first_to_give_up = -1;                       // the peer whose call ended our wait
};

// "rank 1 did not arrive (ranks 0, 2 waited in collective #5)": who did not arrive, who
// was in another collective, who waited; empty parts are left out.
std::string DescribeRollCall(const RollCallResult& result, int64_t sequence);

class MpiRollCall {
 public:
  // `comm` is the roll-call communicator (borrowed; MPI_COMM_NULL makes every call a
  // no-op, for a group of one rank); `rank` and `size` are this rank's place in it.
  MpiRollCall(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}

  // Answers every call that has arrived for this rank with a reply carrying `sequence`,
  // without waiting. Returns the rank of the first caller (a peer that gave up), or -1
  // when no call was waiting.
  int Answer(int64_t sequence);

  // Sends a call for `sequence` to every other rank, then collects replies until each has
  // replied or `grace` has passed, answering other ranks' calls meanwhile.
  // `first_to_give_up` is recorded in the result as it is.
  RollCallResult Call(int64_t sequence, std::chrono::milliseconds grace, int first_to_give_up);

 private:
  static constexpr int kCallTag = 1;
  static constexpr int kReplyTag = 2;

  // Sends `sequence` with `tag` to `to` without waiting for it; the buffer is kept for the
  // rest of the process (a send to a stopped rank may never complete).
  void Send(int to, int tag, int64_t sequence);
  // Takes one waiting message of `tag` into *value (a matched probe and receive; never
  // blocks). Its source rank, or -1 when none waits or it is not one int64 of a rank of
  // the communicator (then dropped).
  int TakeWaiting(int tag, int64_t* value);

  MPI_Comm comm_;
  int rank_;
  int size_;
};

}  // namespace sdrt::internal

#endif  // SDRT_COMM_INTERNAL_MPI_ROLL_CALL_H_
