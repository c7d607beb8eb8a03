// Reporting and inputs shared by the benchmarks (kernels_bench.cc, fp8_kernels_bench.cc,
// state_dict_ops_bench.cc). Header-only.
#ifndef SDRT_BENCH_BENCH_UTIL_H_
#define SDRT_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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

// `n` bytes of a seeded std::mt19937_64 stream.
inline std::vector<uint8_t> RandomBytes(int64_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(n);
  std::mt19937_64 gen(seed);
  for (int64_t i = 0; i < n; i += 8) {
    const uint64_t word = gen();
    std::memcpy(bytes.data() + i, &word, static_cast<size_t>(std::min<int64_t>(8, n - i)));
  }
  return bytes;
}

// The positions where `a` and `b` (of a's size at least) differ.
inline int64_t CountMismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t wrong = 0;
  for (size_t i = 0; i < a.size(); ++i) wrong += a[i] != b[i];
  return wrong;
}

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_BENCH_UTIL_H_
