#include "sdrt/tools/sdrt/internal/bench_timing.h"

#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "sdrt/tools/sdrt/commands.h"
#include "sdrt/tools/sdrt/internal/deadline.h"
#include "sdrt/tools/sdrt/internal/output.h"

namespace sdrt::cli {
namespace {

// The watchdog of the raw MPI calls (StartRawMpiDeadline): one thread that waits for the
// armed call's deadline and, past it, ends the job (EndJobIfTimedOut, which does not return).
class RawMpiWatchdog {
 public:
  static RawMpiWatchdog& Get() {
    static RawMpiWatchdog* const watchdog = new RawMpiWatchdog();  // lives until exit
    return *watchdog;
  }

  void Start(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_) return;
    started_ = true;
    // Read here, on the thread that initialized MPI: the watchdog calls MPI_Abort only
    // where MPI allows a second thread to (else it exits the process, which mpiexec sees).
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    multiple_ = level == MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    timeout_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::thread([this] { Watch(); }).detach();
  }

  // Until Disarm, `what` must end within the timeout (nothing when not started).
  void Arm(const char* what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_) return;
    what_ = what;
    deadline_ = Clock::now() + timeout_;
    armed_ = true;
    wake_.notify_one();
  }
  void Disarm() {
    std::lock_guard<std::mutex> lock(mutex_);
    armed_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;

  void Watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      if (!armed_) {
        wake_.wait(lock);
        continue;
      }
      const Clock::time_point deadline = deadline_;
      if (wake_.wait_until(lock, deadline) == std::cv_status::no_timeout || !armed_ ||
          deadline_ != deadline) {
        continue;  // disarmed or armed again meanwhile
      }
      const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count();
      const absl::Status late = absl::DeadlineExceededError(
          absl::StrCat(what_, " (raw MPI, rank ", rank_, " of ", size_, "): not complete after ",
                       ms, " ms; a rank is missing, stopped or cut off (--timeout)"));
      lock.unlock();
      if (multiple_) EndJobIfTimedOut("bench", late);  // does not return
      ReportError("bench", late, /*rank=*/0);
      std::_Exit(kExitRuntimeError);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool started_ = false, armed_ = false, multiple_ = false;
  int rank_ = 0, size_ = 0;
  Clock::duration timeout_{};
  Clock::time_point deadline_{};
  const char* what_ = "";
};

// A raw MPI call's region under the watchdog.
class RawMpiGuard {
 public:
  explicit RawMpiGuard(const char* what) { RawMpiWatchdog::Get().Arm(what); }
  ~RawMpiGuard() { RawMpiWatchdog::Get().Disarm(); }
  RawMpiGuard(const RawMpiGuard&) = delete;
  RawMpiGuard& operator=(const RawMpiGuard&) = delete;
};

int64_t MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

struct Timing {
  double seconds = 0;
  int64_t faults = 0;
};

// The slowest rank's time of `call`, and the most minor page faults a rank took in it.
// `raw` names a call of raw MPI (a flat baseline), which runs under the watchdog with the
// barrier and reductions around it (armed outside the timed region); sdrt's calls have
// their own deadlines, and a DeadlineExceeded of theirs ends the job here, before a raw
// reduction would wait for the missing rank.
Timing TimeOnce(const char* raw, const std::function<absl::Status()>& call, absl::Status* status) {
  // Each raw collective under its own deadline, armed outside the timed region.
  std::optional<RawMpiGuard> guard;
  guard.emplace("the barrier before a timed run");
  MPI_Barrier(MPI_COMM_WORLD);
  guard.reset();
  if (raw != nullptr) guard.emplace(raw);
  const int64_t faults = MinorFaults();
  const double start = MPI_Wtime();
  *status = call();
  Timing t{MPI_Wtime() - start, MinorFaults() - faults};
  guard.reset();
  EndJobIfTimedOut("bench", *status);
  guard.emplace("the slowest rank's time of a run (MPI_Allreduce)");
  MPI_Allreduce(MPI_IN_PLACE, &t.seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &t.faults, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return t;
}

}  // namespace

BenchSpread Summarize(std::vector<double> seconds) {
  if (seconds.empty()) return {};
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = n % 2 == 1 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
  return {median, seconds.front(), seconds.back()};
}

absl::Status MeasureRow(Communicator& world, const BenchCalls& calls, int warmup, int iterations,
                        BenchTimes* times) {
  for (int it = 0; it < warmup + iterations; ++it) {
    const bool timed = it >= warmup;
    absl::Status status;
    // Which of the three goes first rotates: sdrt first, then flat first, then fresh first.
    for (int k = 0; k < 3; ++k) {
      switch ((k + it) % 3) {
        case 0: {
          calls.prepare();
          absl::Status sdrt;
          const Timing t = TimeOnce(nullptr, calls.sdrt, &sdrt);
          status.Update(sdrt);
          if (timed) {
            times->sdrt.push_back(t.seconds);
            times->sdrt_faults.push_back(static_cast<double>(t.faults));
          }
          break;
        }
        case 1: {
          absl::Status flat;
          const Timing t = TimeOnce(
              calls.raw_baselines ? "the flat MPI baseline" : nullptr,
              [&] {
                calls.flat();
                return absl::OkStatus();
              },
              &flat);
          if (timed) times->flat.push_back(t.seconds);
          break;
        }
        default: {
          absl::Status fresh;
          const Timing t =
              TimeOnce(calls.raw_baselines ? "the flat MPI baseline into a fresh buffer" : nullptr,
                       calls.fresh, &fresh);
          status.Update(fresh);
          calls.release();
          if (timed) times->fresh.push_back(t.seconds);
          break;
        }
      }
    }
    status = AgreeUnlessTimedOut(world, status);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> MeasureRuns(Communicator& world,
                                                const std::function<absl::Status()>& call,
                                                int warmup, int iterations) {
  std::vector<double> seconds;
  for (int it = 0; it < warmup + iterations; ++it) {
    absl::Status status;
    const Timing t = TimeOnce(nullptr, call, &status);
    status = AgreeUnlessTimedOut(world, status);
    if (!status.ok()) return status;
    if (it >= warmup) seconds.push_back(t.seconds);
  }
  return seconds;
}

void UnmapDeleter::operator()(uint8_t* p) const { munmap(p, bytes); }

FreshBuffer AllocateFresh(int64_t bytes) {
  const size_t bytes_given = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  void* p = mmap(nullptr, bytes_given, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return FreshBuffer();
  return FreshBuffer(static_cast<uint8_t*>(p), UnmapDeleter{bytes_given});
}

uint8_t* FreshOrWarm(int64_t bytes, uint8_t* warm, FreshBuffer* fresh, absl::Status* status) {
  *fresh = AllocateFresh(bytes);
  if (*fresh != nullptr) return fresh->get();
  *status = absl::ResourceExhaustedError(
      absl::StrCat("sdrt bench: no memory for a fresh buffer of ", bytes, " bytes"));
  return warm;
}

void StartRawMpiDeadline(double seconds) { RawMpiWatchdog::Get().Start(seconds); }

int64_t SumOverRanks(int64_t value) {
  const RawMpiGuard guard("a sum over the ranks (MPI_Allreduce)");
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

std::vector<int64_t> GatherOverRanks(int64_t value) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> values(static_cast<size_t>(size));
  const RawMpiGuard guard("every rank's count (MPI_Allgather)");
  MPI_Allgather(&value, 1, MPI_INT64_T, values.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  return values;
}

}  // namespace sdrt::cli
