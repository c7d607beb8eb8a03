// What bench/sync_soak.cc records per step on each rank, and its report: the ranks' records
// reduced to rank 0, a table there, the JSON, and the verdict against the limits.
#ifndef SDRT_BENCH_SOAK_REPORT_H_
#define SDRT_BENCH_SOAK_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sdrt/bench/alloc_counter.h"
#include "sdrt/bench/soak_state.h"

namespace sdrt::bench {

// One rank's figures, step by step (index step - 1); sized up front, so recording a step
// allocates nothing.
struct SoakRecord {
  SoakRecord(int64_t steps, int64_t reference_step);
  void Step(int64_t step, double seconds, const AllocationCounts& allocs, int64_t pins);
  void Checked(int64_t step, int64_t wrong, const Resident& resident);
  void Baseline(int64_t step, double seconds) { baseline[static_cast<size_t>(step - 1)] = seconds; }

  int64_t reference_step = 0;  // the step whose resident memory is the reference
  std::vector<double> seconds;
  std::vector<double> baseline;  // the memcpy of SoakSetup::baseline_bytes after the step
  std::vector<int64_t> news, mallocs, mpi_mallocs, pins, wrong;
  std::vector<int64_t> private_rss;  // Resident::private_bytes after each step
  Resident reference, last;  // after the reference step and the last
};

struct SoakSetup {
  std::string op, layout;
  int ranks = 0;
  double scale = 1;
  int64_t tensors = 0, model_bytes = 0;
  int64_t baseline_bytes = 0;   // what each rank's baseline memcpy copies: model_bytes / ranks
  int64_t warmup = 1;           // steps before the steady state
  int64_t max_allocs = -1;      // the most allocations outside MPI in a steady step; -1: none
  // The growth of private resident memory (Resident::private_bytes) from the reference step
  // to the last, as a fraction, at most; -1: no limit.
  double max_rss_growth = -1;
};

// Collective over MPI_COMM_WORLD. Rank 0 prints the table and writes `json_path` (when not
// empty). Returns the exit code, the same on every rank: 0, or 1 when a step differed, a
// limit was passed or the JSON could not be written.
int ReportSoak(const SoakSetup& setup, const SoakRecord& record, const std::string& json_path);

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_SOAK_REPORT_H_
