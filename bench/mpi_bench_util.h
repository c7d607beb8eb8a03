// What the mpiexec benchmarks (load_bench.cc, reshard_bench.cc) share: failing the whole
// job on an error, reductions over the world, and the median and spread of repetitions.
// Header-only.
#ifndef SDRT_BENCH_MPI_BENCH_UTIL_H_
#define SDRT_BENCH_MPI_BENCH_UTIL_H_

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/mpi_communicator.h"

namespace sdrt::bench {

// This process's rank in MPI_COMM_WORLD, for messages (0 before MPI starts).
inline int& BenchRank() {
  static int rank = 0;
  return rank;
}

// Ends the job (exit 1 on every rank) when `status` is not OK, naming the rank and `what`.
inline void Check(const absl::Status& status, const std::string& what) {
  if (status.ok()) return;
  std::fprintf(stderr, "rank %d: %s: %s\n", BenchRank(), what.c_str(), status.ToString().c_str());
  MpiCommunicator::AbortJob(1);
}

template <typename T>
T Check(absl::StatusOr<T> value, const std::string& what) {
  Check(value.status(), what);
  return *std::move(value);
}

inline int64_t Reduce(int64_t value, MPI_Op op) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, op, MPI_COMM_WORLD);
  return value;
}

inline double Reduce(double value, MPI_Op op) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
  return value;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

// Median, min and max of `t` (not empty).
inline Spread Summarize(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  return {n % 2 == 1 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2, t.front(), t.back()};
}

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_MPI_BENCH_UTIL_H_
