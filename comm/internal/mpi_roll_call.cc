#include "sdrt/comm/internal/mpi_roll_call.h"

#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace sdrt::internal {
namespace {

using Clock = std::chrono::steady_clock;

// "rank 1" or "ranks 1, 3".
std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

}  // namespace

std::string DescribeRollCall(const RollCallResult& result, int64_t sequence) {
  std::vector<std::string> parts;
  if (!result.absent.empty()) {
    parts.push_back(absl::StrCat(RankList(result.absent), " did not arrive"));
  }
  for (const auto& [rank, theirs] : result.elsewhere) {
    parts.push_back(absl::StrCat("rank ", rank, " waits in collective #", theirs));
  }
  std::string text = absl::StrJoin(parts, "; ");
  if (text.empty()) text = "every rank arrived but the collective did not complete";
  if (!result.present.empty()) {
    absl::StrAppend(&text, " (", RankList(result.present), " waited in collective #", sequence,
                    ")");
  }
  return text;
}

void MpiRollCall::Send(int to, int tag, int64_t sequence) {
  static std::mutex mutex;
  static auto* buffers = new std::deque<int64_t>();  // never freed: see the header
  int64_t* buffer = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    buffers->push_back(sequence);
    buffer = &buffers->back();  // a deque keeps its elements in place
  }
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Isend(buffer, 1, MPI_INT64_T, to, tag, comm_, &request) == MPI_SUCCESS) {
    MPI_Request_free(&request);
  }
}

int MpiRollCall::Answer(int64_t sequence) {
  int first_caller = -1;
  if (comm_ == MPI_COMM_NULL) return first_caller;
  while (true) {
    int64_t theirs = 0;
    const int source = TakeWaiting(kCallTag, &theirs);
    if (source < 0) return first_caller;
    Send(source, kReplyTag, sequence);
    if (first_caller < 0) first_caller = source;
  }
}

int MpiRollCall::TakeWaiting(int tag, int64_t* value) {
  // A matched probe: the receive takes exactly the message probed. A plain probe and
  // receive could block for good in the receive, when what the probe saw was taken or
  // belonged elsewhere (a message of a rank of an earlier job, stopped and resumed, on a
  // communicator of the same context).
  int waiting = 0;
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, tag, comm_, &waiting, &message, &status) != MPI_SUCCESS ||
      !waiting) {
    return -1;
  }
  int count = 0;
  if (MPI_Get_count(&status, MPI_INT64_T, &count) != MPI_SUCCESS || count != 1) {
    // Not one of ours: taken whole into nothing and left out.
    MPI_Mrecv(nullptr, 0, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    return -1;
  }
  if (MPI_Mrecv(value, 1, MPI_INT64_T, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS) return -1;
  return status.MPI_SOURCE >= 0 && status.MPI_SOURCE < size_ ? status.MPI_SOURCE : -1;
}

RollCallResult MpiRollCall::Call(int64_t sequence, std::chrono::milliseconds grace,
                                 int first_to_give_up) {
  RollCallResult result;
  result.first_to_give_up = first_to_give_up;
  std::vector<int64_t> replies(size_, -1);  // -1: none yet
  std::vector<bool> replied(size_, false);
  replied[rank_] = true;
  replies[rank_] = sequence;
  if (comm_ != MPI_COMM_NULL) {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) Send(r, kCallTag, sequence);
    }
    int missing = size_ - 1;
    const Clock::time_point end = Clock::now() + grace;
    while (missing > 0 && Clock::now() < end) {
      Answer(sequence);
      int64_t theirs = 0;
      const int source = TakeWaiting(kReplyTag, &theirs);
      if (source < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (!replied[source]) {
        replied[source] = true;
        replies[source] = theirs;
        --missing;
      }
    }
    Answer(sequence);  // a call that came in last still gets its reply
  }
  for (int r = 0; r < size_; ++r) {
    if (!replied[r]) {
      result.absent.push_back(r);
    } else if (replies[r] == sequence) {
      result.present.push_back(r);
    } else {
      result.elsewhere.emplace_back(r, replies[r]);
    }
  }
  return result;
}

}  // namespace sdrt::internal
