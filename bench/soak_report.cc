// The soak's records and report (soak_report.h).
#include "sdrt/bench/soak_report.h"

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "nlohmann/json.hpp"

namespace sdrt::bench {
namespace {

// One rank's summary, as sent to rank 0.
enum Field {
  kAllocsWarmup,    // allocations outside MPI in the warm-up steps, in all
  kAllocsMax,       // the most in one steady step
  kAllocsMaxStep,   // that step (0: none allocated)
  kAllocsTotal,     // in the steady steps, in all
  kNewsTotal,       // of which operator new
  kMallocsTotal,    // of which malloc & co.
  kMpiTotal,        // mallocs by the MPI library in the steady steps (apart)
  kPinsWarmup,      // host registrations and pinned allocations in the warm-up steps
  kPinsTotal,       // in the steady steps
  kRssReference,    // resident bytes after the reference step, all
  kRssLast,         // after the last step
  kShmReference,    // of which shared memory (MPI's segments)
  kShmLast,
  kFields,
};

std::vector<int64_t> Summarize(const SoakRecord& r, int64_t warmup) {
  std::vector<int64_t> f(kFields, 0);
  for (size_t i = 0; i < r.seconds.size(); ++i) {
    const int64_t allocs = r.news[i] + r.mallocs[i];
    if (static_cast<int64_t>(i) < warmup) {
      f[kAllocsWarmup] += allocs;
      f[kPinsWarmup] += r.pins[i];
      continue;
    }
    if (allocs > f[kAllocsMax]) {
      f[kAllocsMax] = allocs;
      f[kAllocsMaxStep] = static_cast<int64_t>(i) + 1;
    }
    f[kAllocsTotal] += allocs;
    f[kNewsTotal] += r.news[i];
    f[kMallocsTotal] += r.mallocs[i];
    f[kMpiTotal] += r.mpi_mallocs[i];
    f[kPinsTotal] += r.pins[i];
  }
  f[kRssReference] = r.reference.total;
  f[kRssLast] = r.last.total;
  f[kShmReference] = r.reference.shared;
  f[kShmLast] = r.last.shared;
  return f;
}

// The nearest-rank percentile `p` of `sorted` (not empty).
double Percentile(const std::vector<double>& sorted, double p) {
  const size_t k = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::max<size_t>(k, 1) - 1];
}

double Ratio(int64_t last, int64_t reference) {
  return reference > 0 ? static_cast<double>(last) / static_cast<double>(reference) : 0;
}

}  // namespace

SoakRecord::SoakRecord(int64_t steps, int64_t reference)
    : reference_step(reference),
      seconds(static_cast<size_t>(steps)),
      baseline(static_cast<size_t>(steps)),
      news(static_cast<size_t>(steps)),
      mallocs(static_cast<size_t>(steps)),
      mpi_mallocs(static_cast<size_t>(steps)),
      pins(static_cast<size_t>(steps)),
      wrong(static_cast<size_t>(steps)),
      private_rss(static_cast<size_t>(steps)) {}

void SoakRecord::Step(int64_t step, double s, const AllocationCounts& allocs, int64_t p) {
  const size_t i = static_cast<size_t>(step - 1);
  seconds[i] = s;
  news[i] = allocs.news;
  mallocs[i] = allocs.mallocs;
  mpi_mallocs[i] = allocs.mpi_mallocs;
  pins[i] = p;
}

void SoakRecord::Checked(int64_t step, int64_t w, const Resident& resident) {
  wrong[static_cast<size_t>(step - 1)] = w;
  private_rss[static_cast<size_t>(step - 1)] = resident.private_bytes();
  if (step == reference_step) reference = resident;
  if (step == static_cast<int64_t>(seconds.size())) last = resident;
}

int ReportSoak(const SoakSetup& setup, const SoakRecord& record, const std::string& json_path) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int steps = static_cast<int>(record.seconds.size());
  std::vector<double> slowest(record.seconds.size());
  std::vector<int64_t> wrong(record.wrong.size());
  MPI_Reduce(record.seconds.data(), slowest.data(), steps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  std::vector<double> copies(record.baseline.size());
  MPI_Reduce(record.baseline.data(), copies.data(), steps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(record.wrong.data(), wrong.data(), steps, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  const std::vector<int64_t> mine = Summarize(record, setup.warmup);
  std::vector<int64_t> all(static_cast<size_t>(kFields) * setup.ranks);
  MPI_Gather(mine.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, 0,
             MPI_COMM_WORLD);
  // Private resident memory along the run (steps 10, 30, 100, 300, 1,000, ... and the last),
  // every rank's: where it grows, and whether it stops.
  std::vector<int64_t> curve_steps;
  for (int64_t s = 10; s < steps; s *= 10) {
    curve_steps.push_back(s);
    if (3 * s < steps) curve_steps.push_back(3 * s);
  }
  curve_steps.push_back(steps);
  std::vector<int64_t> curve_mine;
  for (const int64_t s : curve_steps) curve_mine.push_back(record.private_rss[s - 1]);
  std::vector<int64_t> curve_all(curve_mine.size() * static_cast<size_t>(setup.ranks));
  MPI_Gather(curve_mine.data(), static_cast<int>(curve_mine.size()), MPI_INT64_T,
             curve_all.data(), static_cast<int>(curve_mine.size()), MPI_INT64_T, 0,
             MPI_COMM_WORLD);
  int code = 0;
  if (rank == 0) {
    const int64_t exact = std::count(wrong.begin(), wrong.end(), int64_t{0});
    int64_t wrong_elements = 0;
    for (const int64_t w : wrong) wrong_elements += w;
    std::vector<double> steady(slowest.begin() + setup.warmup, slowest.end());
    std::sort(steady.begin(), steady.end());
    const double p50 = Percentile(steady, 0.5), p99 = Percentile(steady, 0.99);
    std::vector<double> copy(copies.begin() + setup.warmup, copies.end());
    std::sort(copy.begin(), copy.end());
    const double copy_p50 = Percentile(copy, 0.5), copy_p99 = Percentile(copy, 0.99);
    std::printf("sync_soak --op %s: %d rank%s (%s); tiny-llama x%g, %lld tensors, %.2f MB "
                "float32\n",
                setup.op.c_str(), setup.ranks, setup.ranks == 1 ? "" : "s", setup.layout.c_str(),
                setup.scale, static_cast<long long>(setup.tensors), setup.model_bytes / 1e6);
    std::printf("steps %d, bit-exact %lld/%d; steady steps %lld..%d (after %lld warm-up)\n",
                steps, static_cast<long long>(exact), steps,
                static_cast<long long>(setup.warmup + 1), steps,
                static_cast<long long>(setup.warmup));
    std::printf("step time (slowest rank): first %.1f us, p50 %.1f us, p99 %.1f us, "
                "p99/p50 %.3f, max %.1f us\n",
                slowest[0] * 1e6, p50 * 1e6, p99 * 1e6, p99 / p50, steady.back() * 1e6);
    std::printf("baseline, memcpy of %lld bytes per rank after each step (slowest rank): p50 "
                "%.1f us, p99 %.1f us, p99/p50 %.3f, max %.1f us\n",
                static_cast<long long>(setup.baseline_bytes), copy_p50 * 1e6, copy_p99 * 1e6,
                copy_p99 / copy_p50, copy.back() * 1e6);
    std::printf("allocations outside MPI (operator new + malloc): in the warm-up, the most in "
                "a steady step (which), in all steady steps; MPI's own mallocs apart\n");
    std::printf("resident memory after step %lld and step %d, KiB: all (of which MPI's shared "
                "segments); the ratio of all, and of the private part (all - shared)\n",
                static_cast<long long>(record.reference_step), steps);
    std::printf("rank  warm-up  max/step (step)  total  new/malloc  MPI's  pins  RSS before  "
                "RSS after  ratio  private\n");
    nlohmann::json ranks = nlohmann::json::array();
    for (int r = 0; r < setup.ranks; ++r) {
      const int64_t* f = all.data() + static_cast<size_t>(r) * kFields;
      const double ratio = Ratio(f[kRssLast], f[kRssReference]);
      const double private_ratio =
          Ratio(f[kRssLast] - f[kShmLast], f[kRssReference] - f[kShmReference]);
      std::printf("%4d  %7lld  %8lld (%4lld)  %5lld  %4lld/%-5lld  %5lld  %4lld  %6lld (%4lld)  "
                  "%6lld (%4lld)  %.4f  %.4f\n",
                  r, static_cast<long long>(f[kAllocsWarmup]),
                  static_cast<long long>(f[kAllocsMax]), static_cast<long long>(f[kAllocsMaxStep]),
                  static_cast<long long>(f[kAllocsTotal]), static_cast<long long>(f[kNewsTotal]),
                  static_cast<long long>(f[kMallocsTotal]), static_cast<long long>(f[kMpiTotal]),
                  static_cast<long long>(f[kPinsWarmup] + f[kPinsTotal]),
                  static_cast<long long>(f[kRssReference] / 1024),
                  static_cast<long long>(f[kShmReference] / 1024),
                  static_cast<long long>(f[kRssLast] / 1024),
                  static_cast<long long>(f[kShmLast] / 1024), ratio, private_ratio);
      if (setup.max_allocs >= 0 && f[kAllocsMax] > setup.max_allocs) code = 1;
      if (setup.max_rss_growth >= 0 && private_ratio - 1 > setup.max_rss_growth) code = 1;
      ranks.push_back({{"rank", r},
                       {"allocations_warmup", f[kAllocsWarmup]},
                       {"allocations_per_step_max", f[kAllocsMax]},
                       {"allocations_per_step_max_step", f[kAllocsMaxStep]},
                       {"allocations_total", f[kAllocsTotal]},
                       {"operator_new_total", f[kNewsTotal]},
                       {"malloc_total", f[kMallocsTotal]},
                       {"mpi_malloc_total", f[kMpiTotal]},
                       {"pins_warmup", f[kPinsWarmup]},
                       {"pins_total", f[kPinsTotal]},
                       {"rss_reference_bytes", f[kRssReference]},
                       {"rss_last_bytes", f[kRssLast]},
                       {"shared_reference_bytes", f[kShmReference]},
                       {"shared_last_bytes", f[kShmLast]},
                       {"rss_ratio", ratio},
                       {"private_rss_ratio", private_ratio}});
    }
    if (exact != steps) code = 1;
    std::printf("private resident memory along the run, KiB, after steps");
    for (const int64_t s : curve_steps) std::printf(" %lld", static_cast<long long>(s));
    std::printf("\n");
    nlohmann::json curve = nlohmann::json::array();
    for (int r = 0; r < setup.ranks; ++r) {
      const auto first = curve_all.begin() + static_cast<int64_t>(r * curve_mine.size());
      const std::vector<int64_t> row(first, first + static_cast<int64_t>(curve_mine.size()));
      std::printf("%4d ", r);
      for (const int64_t b : row) std::printf(" %lld", static_cast<long long>(b / 1024));
      std::printf("\n");
      curve.push_back(row);
    }
    std::printf("%s\n", code == 0 ? "ok" : "FAILED (a step differed or a limit was passed)");
    if (!json_path.empty()) {
      const nlohmann::json j = {
          {"op", setup.op},          {"layout", setup.layout},
          {"ranks", setup.ranks},    {"scale", setup.scale},
          {"tensors", setup.tensors}, {"model_bytes", setup.model_bytes},
          {"steps", steps},          {"warmup", setup.warmup},
          {"bit_exact_steps", exact}, {"wrong_elements", wrong_elements},
          {"rss_reference_step", record.reference_step},
          {"step_seconds",
           {{"first", slowest[0]}, {"p50", p50}, {"p99", p99}, {"max", steady.back()},
            {"p99_over_p50", p99 / p50}}},
          {"baseline_memcpy",
           {{"bytes_per_rank", setup.baseline_bytes}, {"p50", copy_p50}, {"p99", copy_p99},
            {"max", copy.back()}, {"p99_over_p50", copy_p99 / copy_p50}}},
          {"limits",
           {{"max_allocations_per_step", setup.max_allocs},
            {"max_rss_growth", setup.max_rss_growth}}},
          {"per_rank", ranks},
          {"private_rss_curve", {{"steps", curve_steps}, {"bytes_per_rank", curve}}},
          {"ok", code == 0}};
      std::ofstream out(json_path);
      out << j.dump(2) << "\n";
      if (!out) {
        std::fprintf(stderr, "sync_soak: cannot write %s\n", json_path.c_str());
        code = 1;
      }
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return code;
}

}  // namespace sdrt::bench
