#include "sdrt/tools/sdrt/internal/bench_timing.h"

#include <mpi.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

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
Timing TimeOnce(const std::function<void()>& call) {
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t faults = MinorFaults();
  const double start = MPI_Wtime();
  call();
  Timing t{MPI_Wtime() - start, MinorFaults() - faults};
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
          const Timing t = TimeOnce([&] { sdrt = calls.sdrt(); });
          status.Update(sdrt);
          if (timed) {
            times->sdrt.push_back(t.seconds);
            times->sdrt_faults.push_back(static_cast<double>(t.faults));
          }
          break;
        }
        case 1: {
          const Timing t = TimeOnce(calls.flat);
          if (timed) times->flat.push_back(t.seconds);
          break;
        }
        default: {
          absl::Status fresh;
          const Timing t = TimeOnce([&] { fresh = calls.fresh(); });
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
    const Timing t = TimeOnce([&] { status = call(); });
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

int64_t SumOverRanks(int64_t value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

std::vector<int64_t> GatherOverRanks(int64_t value) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int64_t> values(static_cast<size_t>(size));
  MPI_Allgather(&value, 1, MPI_INT64_T, values.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
  return values;
}

}  // namespace sdrt::cli
