// Reporting shared by the benchmarks (kernels_bench.cc, state_dict_ops_bench.cc).
// Header-only.
#ifndef SDRT_BENCH_BENCH_UTIL_H_
#define SDRT_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace sdrt::bench {

// False (and the benchmark skipped with the status message) when `status` is not OK.
inline bool Check(benchmark::State& state, const absl::Status& status) {
  if (status.ok()) return true;
  state.SkipWithError(std::string(status.message()).c_str());
  return false;
}

// Reports `bytes_moved` (read + written) per iteration, also as the "GB" counter (printed
// as a rate: GB/s, 1e9 bytes), and `wrong`, the number of output bytes that differ from
// the reference.
inline void Report(benchmark::State& state, int64_t bytes_moved, int64_t wrong) {
  state.SetBytesProcessed(state.iterations() * bytes_moved);
  state.counters["GB"] = benchmark::Counter(static_cast<double>(bytes_moved) / 1e9,
                                            benchmark::Counter::kIsIterationInvariantRate);
  state.counters["wrong"] = static_cast<double>(wrong);
}

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_BENCH_UTIL_H_
