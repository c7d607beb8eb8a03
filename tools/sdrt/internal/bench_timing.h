// How `sdrt bench` times a row: sdrt's call, the flat baseline into a warm buffer and the
// same baseline into a fresh one take turns (which goes first rotates from run to run),
// warm-up runs first; a run's time is the slowest rank's (a barrier before, MPI_MAX after),
// and a row reports the median and [min..max] over the timed runs. Uses MPI_COMM_WORLD, so
// MPI must be initialized (the session's MpiCommunicator::World does it).
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_TIMING_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_TIMING_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::cli {

struct BenchSpread {
  double median = 0, min = 0, max = 0;  // seconds
};

// Median, min and max of `seconds` (zeros when empty).
BenchSpread Summarize(std::vector<double> seconds);

// The runs of one row, seconds per timed run, in order.
struct BenchTimes {
  std::vector<double> sdrt, flat, fresh;
  std::vector<double> sdrt_faults;  // minor page faults in one sdrt call, the most of any rank
};

// What one row runs. `prepare` (untimed) readies sdrt's inputs; `sdrt` is the timed sdrt
// call, returning its Status; `flat` and `fresh` the two baselines (`fresh` returns
// ResourceExhausted when it could not allocate; it still takes part in its collective);
// `release` (untimed) frees what `fresh` allocated. `raw_baselines`: the baselines are
// raw MPI (or local copies), run under StartRawMpiDeadline's watchdog; false where they
// are sdrt calls with deadlines of their own (a bound sync, an Exchange), which end the
// job themselves on a DeadlineExceeded (EndJobIfTimedOut).
struct BenchCalls {
  std::function<void()> prepare;
  std::function<absl::Status()> sdrt;
  std::function<void()> flat;
  std::function<absl::Status()> fresh;
  std::function<void()> release;
  bool raw_baselines = true;
};

// `warmup` + `iterations` runs of `calls` into *times (the timed ones only). After every
// run its first error (the sdrt call's or the fresh baseline's) is agreed over `world`
// (outside the timed region), so that a failure on any rank stops every rank at the same
// run with the same error.
absl::Status MeasureRow(Communicator& world, const BenchCalls& calls, int warmup, int iterations,
                        BenchTimes* times);

// `warmup` + `iterations` runs of `call` alone, its status agreed over `world` after each
// (as MeasureRow does): the slowest rank's seconds of each timed run, in order.
absl::StatusOr<std::vector<double>> MeasureRuns(Communicator& world,
                                                const std::function<absl::Status()>& call,
                                                int warmup, int iterations);

// New pages that nothing has touched (an anonymous mapping of its own, page aligned), for the
// "fresh" baseline: what any call returning new memory pays at least for first touching it.
// Not malloc: for buffers under glibc's mmap threshold (32 MiB at most) it hands back heap
// memory the previous run touched, and every other run's figure would be warm.
struct UnmapDeleter {
  size_t bytes = 0;  // the mapping's length
  void operator()(uint8_t* p) const;
};
using FreshBuffer = std::unique_ptr<uint8_t, UnmapDeleter>;
FreshBuffer AllocateFresh(int64_t bytes);
// A fresh buffer of `bytes` in *fresh, or when memory runs out the warm one (so that this
// rank still takes part in the collective) and ResourceExhausted in *status.
uint8_t* FreshOrWarm(int64_t bytes, uint8_t* warm, FreshBuffer* fresh, absl::Status* status);

// --timeout for the raw MPI calls below and in the timing of a row (its barriers and
// reductions, the flat baselines): a watchdog thread, started here, that ends the job as
// EndJobIfTimedOut does (this rank's DeadlineExceeded naming the call, exit status 1) when
// one of them runs past `seconds`; a rank is missing, so nothing can be agreed. Call once,
// before the first of them; without it they have no deadline.
void StartRawMpiDeadline(double seconds);

// Sum of `value` over the ranks of MPI_COMM_WORLD.
int64_t SumOverRanks(int64_t value);
// Every rank's `value`, in rank order (MPI_COMM_WORLD).
std::vector<int64_t> GatherOverRanks(int64_t value);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_TIMING_H_
