// What `sdrt bench` prints: a header (the workload and its digest, the machine, the
// settings) and one row per op in nccl-tests' columns (size, count, type, root, time,
// algbw, busbw, #wrong) followed by sdrt / flat, sdrt / fresh and collectives; or with
// --json one list with an object per row. bench/peer/pytorch_distributed_peer.py prints
// the same header lines, columns and keys for PyTorch.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_ROWS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_ROWS_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/bench_workloads.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {

// The ops, in the order rows are printed.
inline constexpr const char* kBenchOps[] = {"gather",
                                            "gather_r0_off",
                                            "broadcast",
                                            "distribute",
                                            "gather_partial",
                                            "gather_planned",
                                            "broadcast_planned",
                                            "distribute_planned",
                                            "gather_bound",
                                            "broadcast_bound",
                                            "distribute_bound",
                                            "sync_mapped",
                                            "sync_fp8",
                                            "sync_regroup",
                                            "links",
                                            "sync_layout"};

// The ops of `text` (comma separated), in kBenchOps order; InvalidArgument naming an
// unknown one, or for none.
absl::StatusOr<std::vector<std::string>> ParseBenchOps(const std::string& text);

// Where the run happens.
struct BenchMachine {
  int hardware_threads = 0;  // std::thread::hardware_concurrency()
  int affinity_cores = 0;    // CPUs in this process's sched_getaffinity mask
  int ranks = 0;
  std::string backend;      // the data communicator's backend: "mpi" (or "nccl")
  std::string device;       // "cpu", "cuda:0"
  std::string mpi_library;  // the first line of MPI_Get_library_version
  std::string version;      // sdrt's
};

// The settings of a run.
struct BenchSettings {
  int64_t bucket_bytes = 0;
  int warmup = 0;
  int iterations = 0;
  // The synthetic workloads' tensors and every rank's pieces are views of one allocation
  // per rank (as a training framework's flat parameter buffer is), on 2 MiB pages like the
  // flat baseline's buffer; else each tensor is its own allocation.
  bool arena_inputs = false;
  // sync_layout's parallel layouts (core/checkpoint/parallel_layout.h): the trainer's
  // pieces and the engine's, both over the run's ranks.
  std::string from_layout;
  std::string to_layout;
};

// What the links row measured: the --cluster links of `sdrt simulate`.
struct BenchLinks {
  double pair = 0;     // bytes per second between two ranks of one node, per direction
  double nic = 0;      // the same between ranks of two nodes (one node: the pair's)
  double latency = 0;  // seconds per exchange
  double copy = 0;     // bytes per second of a memcpy on every rank at once
  int64_t nodes = 1;
  int64_t gpus_per_node = 1;  // ranks per node (the most of any node)
  std::string cluster;        // "nodes=N,gpus=G,nvlink=..GB/s,nic=..GB/s,latency=..us,copy=.."
};

// One op's measurements.
struct BenchRow {
  std::string op;
  int64_t size = 0;   // bytes of the full state dict
  int64_t count = 0;  // tensors
  std::string type;   // the dtype, or "mixed"
  int root = -1;      // 0 for broadcast, -1 where there is none
  BenchTimes times;
  // Bytes per second base for busbw: the full size, or for distribute rank 0's local bytes.
  int64_t busbw_bytes = 0;
  TransferStats stats;     // rank 0's last sdrt call
  int64_t wrong = 0;       // bytes of sdrt's results that differ from the source, all ranks
  int64_t flat_wrong = 0;  // the same for the flat baseline's buffer
  // Every rank's bytes between ranks of one call, sdrt's and the baseline's, where a row
  // compares them (sync_fp8, sync_layout); 0 elsewhere.
  int64_t wire_bytes = 0;
  int64_t flat_wire_bytes = 0;
  // sync_layout's layouts with every size spelled out (ParallelLayout::ToString); empty
  // elsewhere.
  std::string from_layout;
  std::string to_layout;
  std::optional<BenchLinks> links;  // the links row's figures
};

// This machine as the session sees it: threads, affinity, ranks, backend, device, the
// MPI library's first line, sdrt's version.
BenchMachine DescribeBenchMachine(const Session& session);

// The text: header lines starting with "# ", then the table.
void PrintBenchText(std::ostream& out, const BenchWorkload& workload, const BenchMachine& machine,
                    const BenchSettings& settings, const std::vector<BenchRow>& rows);

// The --json list: one object per row with workload, op, ratio (sdrt / flat median),
// every column (times in ms with their min, max and runs), digest, ranks and the machine.
nlohmann::ordered_json BenchJson(const BenchWorkload& workload, const BenchMachine& machine,
                                 const BenchSettings& settings, const std::vector<BenchRow>& rows);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_ROWS_H_
