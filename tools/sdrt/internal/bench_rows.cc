#include "sdrt/tools/sdrt/internal/bench_rows.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "sdrt/tools/sdrt/internal/output.h"
#include "sdrt/version.h"

namespace sdrt::cli {
namespace {

// The row's derived figures, from the medians.
struct Figures {
  BenchSpread sdrt, flat, fresh;
  double algbw = 0;  // GB/s: size / time
  double busbw = 0;  // GB/s: gathers algbw (n - 1) / n; gather_partial (an all-reduce)
                     // algbw 2 (n - 1) / n; broadcast algbw; distribute local / time
  double ratio = 0;  // sdrt / flat
  double ratio_fresh = 0;
  double fault_mib = 0;  // minor faults in one sdrt call (median) x 4 KiB
};

Figures FiguresOf(const BenchRow& row, int ranks) {
  Figures f;
  f.sdrt = Summarize(row.times.sdrt);
  f.flat = Summarize(row.times.flat);
  f.fresh = Summarize(row.times.fresh);
  const double t = f.sdrt.median;
  if (t > 0) {
    f.algbw = static_cast<double>(row.size) / t / 1e9;
    const double bus = static_cast<double>(row.busbw_bytes) / t / 1e9;
    f.busbw = row.op == "gather" || row.op == "gather_r0_off" || row.op == "gather_planned" ||
                      row.op == "gather_bound"
                  ? bus * (ranks - 1) / ranks
              : row.op == "gather_partial" ? bus * 2 * (ranks - 1) / ranks
                                           : bus;
  }
  if (f.flat.median > 0) f.ratio = t / f.flat.median;
  if (f.fresh.median > 0) f.ratio_fresh = t / f.fresh.median;
  f.fault_mib = Summarize(row.times.sdrt_faults).median * 4096 / 1048576.0;
  return f;
}

std::vector<double> Milliseconds(const std::vector<double>& seconds) {
  std::vector<double> ms;
  for (double s : seconds) ms.push_back(s * 1e3);
  return ms;
}

std::string Mib(int64_t bytes) {
  return absl::StrFormat("%.4g MiB", static_cast<double>(bytes) / 1048576.0);
}

}  // namespace

void PrintBenchText(std::ostream& out, const BenchWorkload& workload, const BenchMachine& machine,
                    const BenchSettings& settings, const std::vector<BenchRow>& rows) {
  out << "# sdrt bench: workload " << Printable(workload.name) << ": "
      << WithThousands(static_cast<int64_t>(workload.full.size())) << " tensors, "
      << WithThousands(workload.bytes) << " bytes (" << Mib(workload.bytes) << "), "
      << workload.type << ", digest " << absl::StrFormat("%016x", workload.digest) << "\n"
      << "# machine: " << machine.hardware_threads << " cores (" << machine.affinity_cores
      << " in this rank's affinity), " << machine.ranks << " ranks, backend " << machine.backend
      << " (" << Printable(machine.mpi_library) << "), device " << machine.device << "; sdrt "
      << machine.version << "; bucket " << Mib(settings.bucket_bytes) << "; inputs "
      << (!settings.arena_inputs ? "one allocation per tensor"
          : workload.source != nullptr
              ? "the file's tensors mapped, each rank's pieces in one arena"
              : "in one arena per rank")
      << "\n"
      << "# " << Counted(settings.iterations, "timed run") << " after " << settings.warmup
      << " warm-up; time: ms, the median over runs of the slowest rank, [min..max]; "
         "algbw, busbw: GB/s (1e9 B/s)\n"
      << "# flat: one MPI collective of the same bytes in one buffer (distribute: memcpy of the "
         "rank's bytes), warm; fresh: the same into a new, untouched buffer\n";
  Table table({"op", "size", "count", "type", "root", "time", "[min..max]", "algbw", "busbw",
               "#wrong", "sdrt/flat", "sdrt/fresh", "collectives"},
              {false, true, true, false, true, true, true, true, true, true, true, true, true});
  for (const BenchRow& row : rows) {
    const Figures f = FiguresOf(row, machine.ranks);
    table.AddRow({row.op, absl::StrCat(row.size), absl::StrCat(row.count), row.type,
                  absl::StrCat(row.root), absl::StrFormat("%.2f", f.sdrt.median * 1e3),
                  absl::StrFormat("[%.2f..%.2f]", f.sdrt.min * 1e3, f.sdrt.max * 1e3),
                  absl::StrFormat("%.2f", f.algbw), absl::StrFormat("%.2f", f.busbw),
                  absl::StrCat(row.wrong), absl::StrFormat("%.2f", f.ratio),
                  absl::StrFormat("%.2f", f.ratio_fresh), absl::StrCat(row.stats.collectives)});
  }
  table.Print(out);
  if (machine.ranks == 1) {
    out << "# 1 rank: a flat collective moves no bytes (MPI returns at once), so sdrt/flat and "
           "sdrt/fresh compare sdrt's copies against nothing (distribute's memcpy excepted); run "
           "under mpiexec -n 2 or more to compare\n";
  }
  for (const BenchRow& row : rows) {
    if (row.links.has_value()) {
      const BenchLinks& l = *row.links;
      out << absl::StrFormat(
          "# %s: pair %.2f GB/s, nic %.2f GB/s, latency %.3g us%s, copy %.2f GB/s -> sdrt "
          "simulate --cluster %s\n",
          row.op, l.pair / 1e9, l.nic / 1e9, l.latency * 1e6,
          l.latency > 0 ? "" : " (the 64 KiB swap was faster than the line through both)",
          l.copy / 1e9, l.cluster);
    }
    if (!row.from_layout.empty()) {
      out << "# " << row.op << ": " << row.from_layout << " -> " << row.to_layout << "\n";
      if (row.wire_bytes == 0) {
        out << "# " << row.op << ": no byte moves between ranks (each keeps its pieces): its "
            << "GB/s and ratio count copies on each rank only\n";
      }
    }
    if (row.flat_wire_bytes > 0) {
      out << "# " << row.op << ": wire bytes " << WithThousands(row.wire_bytes) << " against "
          << WithThousands(row.flat_wire_bytes) << " for the baseline: "
          << absl::StrFormat("%.3f", static_cast<double>(row.wire_bytes) /
                                         static_cast<double>(row.flat_wire_bytes))
          << "x\n";
    }
    if (row.flat_wrong != 0) {
      out << "# " << row.op << ": the flat baseline's buffer differs from the source in "
          << row.flat_wrong << " bytes\n";
    }
  }
}

nlohmann::ordered_json BenchJson(const BenchWorkload& workload, const BenchMachine& machine,
                                 const BenchSettings& settings, const std::vector<BenchRow>& rows) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const BenchRow& row : rows) {
    const Figures f = FiguresOf(row, machine.ranks);
    list.push_back({{"workload", workload.name},
                    {"op", row.op},
                    {"ratio", f.ratio},
                    {"ratio_fresh", f.ratio_fresh},
                    {"impl", "sdrt"},
                    {"size", row.size},
                    {"count", row.count},
                    {"type", row.type},
                    {"root", row.root},
                    {"time_ms", f.sdrt.median * 1e3},
                    {"time_min_ms", f.sdrt.min * 1e3},
                    {"time_max_ms", f.sdrt.max * 1e3},
                    {"time_runs_ms", Milliseconds(row.times.sdrt)},
                    {"flat_ms", f.flat.median * 1e3},
                    {"flat_min_ms", f.flat.min * 1e3},
                    {"flat_max_ms", f.flat.max * 1e3},
                    {"flat_runs_ms", Milliseconds(row.times.flat)},
                    {"fresh_ms", f.fresh.median * 1e3},
                    {"fresh_min_ms", f.fresh.min * 1e3},
                    {"fresh_max_ms", f.fresh.max * 1e3},
                    {"fresh_runs_ms", Milliseconds(row.times.fresh)},
                    {"algbw", f.algbw},
                    {"busbw", f.busbw},
                    {"wrong", row.wrong},
                    {"flat_wrong", row.flat_wrong},
                    {"collectives", row.stats.collectives},
                    {"exchanges", row.stats.exchanges},
                    {"fault_mib", f.fault_mib},
                    {"digest", absl::StrFormat("%016x", workload.digest)},
                    {"tensors", workload.full.size()},
                    {"ranks", machine.ranks},
                    {"cores", machine.hardware_threads},
                    {"affinity_cores", machine.affinity_cores},
                    {"backend", machine.backend},
                    {"device", machine.device},
                    {"mpi_library", machine.mpi_library},
                    {"version", machine.version},
                    {"bucket_bytes", settings.bucket_bytes},
                    {"inputs", settings.arena_inputs ? "arena" : "tensors"},
                    {"warmup", settings.warmup},
                    {"iters", settings.iterations}});
    nlohmann::ordered_json& out = list.back();
    // Only the rows that plan a reshard count wire bytes (a weight map's, a layout's).
    if (row.flat_wire_bytes > 0 || !row.from_layout.empty()) {
      out["wire_bytes"] = row.wire_bytes;
      out["flat_wire_bytes"] = row.flat_wire_bytes;
    }
    if (!row.from_layout.empty()) {
      out["from"] = row.from_layout;
      out["to"] = row.to_layout;
    }
    if (row.links.has_value()) {
      const BenchLinks& l = *row.links;
      out["pair_bytes_per_second"] = l.pair;
      out["nic_bytes_per_second"] = l.nic;
      out["latency_seconds"] = l.latency;
      out["copy_bytes_per_second"] = l.copy;
      out["nodes"] = l.nodes;
      out["gpus_per_node"] = l.gpus_per_node;
      out["cluster"] = l.cluster;
    }
  }
  return list;
}

absl::StatusOr<std::vector<std::string>> ParseBenchOps(const std::string& text) {
  std::vector<std::string> asked;
  for (absl::string_view op : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    if (std::find(std::begin(kBenchOps), std::end(kBenchOps), op) == std::end(kBenchOps)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown op \"", op, "\" (known: ", absl::StrJoin(kBenchOps, ","), ")"));
    }
    asked.emplace_back(op);
  }
  std::vector<std::string> ops;
  for (const char* op : kBenchOps) {
    if (std::find(asked.begin(), asked.end(), op) != asked.end()) ops.emplace_back(op);
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no op given (known: ", absl::StrJoin(kBenchOps, ","), ")"));
  }
  return ops;
}

BenchMachine DescribeBenchMachine(const Session& session) {
  BenchMachine machine;
  machine.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) machine.affinity_cores = CPU_COUNT(&set);
  machine.ranks = session.size();
  machine.backend = std::string(session.data().backend());
  machine.device = session.device.ToString();
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(library, &length);
  // The first line, its runs of blanks as one space: "MPICH Version: 4.0.2", "Open MPI v5.0.3".
  const std::string text(library, static_cast<size_t>(std::max(0, length)));
  machine.mpi_library = absl::StrJoin(
      absl::StrSplit(text.substr(0, text.find('\n')), absl::ByAnyChar(" \t"), absl::SkipEmpty()),
      " ");
  machine.version = Version();
  return machine;
}

}  // namespace sdrt::cli
