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
    int waiting = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kCallTag, comm_, &waiting, &status) != MPI_SUCCESS ||
        !waiting) {
      return first_caller;
    }
    int64_t theirs = 0;
    if (MPI_Recv(&theirs, 1, MPI_INT64_T, status.MPI_SOURCE, kCallTag, comm_, MPI_STATUS_IGNORE) !=
        MPI_SUCCESS) {
      return first_caller;
    }
    Send(status.MPI_SOURCE, kReplyTag, sequence);
    if (first_caller < 0) first_caller = status.MPI_SOURCE;
  }
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
      int waiting = 0;
      MPI_Status status;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kReplyTag, comm_, &waiting, &status) != MPI_SUCCESS) break;
      if (!waiting) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      int64_t theirs = 0;
      if (MPI_Recv(&theirs, 1, MPI_INT64_T, status.MPI_SOURCE, kReplyTag, comm_,
                   MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        break;
      }
      if (!replied[status.MPI_SOURCE]) {
        replied[status.MPI_SOURCE] = true;
        replies[status.MPI_SOURCE] = theirs;
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
