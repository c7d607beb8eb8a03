// comm_bench: all_gather and broadcast of 1 MiB..256 MiB float32 buffers through
// Communicator (MpiCommunicator) and through the raw MPI call, side by side, printed in
// nccl-tests' columns: size (bytes of the full buffer: all-gather output, broadcast
// buffer), count (elements), type, root, time (us per call, slowest rank, averaged over
// the timed iterations), algbw (size / time, GB/s = 1e9 B/s), busbw (all_gather: algbw *
// (n - 1) / n; broadcast: algbw) and #wrong (bytes that differ from the expected data,
// summed over ranks, checked after the timed calls). Run under `mpiexec -n N`. Flags:
// `--json PATH` also writes the rows as a JSON array (rank 0); `--max-mib M` stops at the
// largest size (1, 4, 16, 64, 256 MiB) not above M (default 256); `--iters N` and
// `--warmup N` set the timed and warm-up calls per row (default 10 and 2).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"

namespace {

int g_warmup = 2;
int g_iterations = 10;

// The value of byte `index` of rank `rank`'s contribution.
uint8_t Expected(int rank, int64_t index) {
  return static_cast<uint8_t>((index * 131 + rank * 31 + 7) & 0xff);
}

struct Row {
  std::string op;
  std::string path;  // "sdrt" or "mpi"
  int64_t size;
  int root;
  double seconds;  // per call, slowest rank
  double algbw;
  double busbw;
  int64_t wrong;
};

// Runs `call` g_warmup + g_iterations times between barriers; returns the slowest rank's
// mean time per call in seconds.
double Time(const std::function<void()>& call) {
  for (int i = 0; i < g_warmup; ++i) call();
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < g_iterations; ++i) call();
  double elapsed = (MPI_Wtime() - start) / g_iterations;
  MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return elapsed;
}

int64_t SumOverRanks(int64_t value) {
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<std::unique_ptr<sdrt::MpiCommunicator>> world = sdrt::MpiCommunicator::World();
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  sdrt::Communicator& comm = **world;
  const int rank = comm.rank();
  const int n = comm.size();
  std::string json_path;
  int64_t max_mib = 256;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
    if (std::strcmp(argv[i], "--max-mib") == 0) max_mib = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) g_iterations = std::max(1, std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--warmup") == 0) g_warmup = std::max(0, std::atoi(argv[i + 1]));
  }

  std::vector<Row> rows;
  for (int64_t size = int64_t{1} << 20; size <= (max_mib << 20); size *= 4) {
    const int64_t per_rank = size / n / 4 * 4;  // whole float32 elements
    const int64_t gathered = per_rank * n;
    sdrt::Tensor input = *sdrt::Tensor::Empty({per_rank / 4}, sdrt::DType::kFloat32);
    sdrt::Tensor output = *sdrt::Tensor::Empty({gathered / 4}, sdrt::DType::kFloat32);
    auto* in = static_cast<uint8_t*>(input.data_ptr());
    for (int64_t i = 0; i < per_rank; ++i) in[i] = Expected(rank, i);
    auto count_wrong_gather = [&] {
      const auto* out = static_cast<const uint8_t*>(output.data_ptr());
      int64_t wrong = 0;
      for (int64_t i = 0; i < gathered; ++i)
        wrong += out[i] != Expected(i / per_rank, i % per_rank);
      std::memset(output.data_ptr(), 0, gathered);
      return SumOverRanks(wrong);
    };
    const double sdrt_gather = Time([&] { (void)comm.AllGather(output, input); });
    rows.push_back({"all_gather", "sdrt", gathered, -1, sdrt_gather, 0, 0, count_wrong_gather()});
    const double mpi_gather = Time([&] {
      MPI_Allgather(in, static_cast<int>(per_rank), MPI_BYTE, output.data_ptr(),
                    static_cast<int>(per_rank), MPI_BYTE, MPI_COMM_WORLD);
    });
    rows.push_back({"all_gather", "mpi", gathered, -1, mpi_gather, 0, 0, count_wrong_gather()});

    const int root = 0;
    sdrt::Tensor buffer = *sdrt::Tensor::Empty({size / 4}, sdrt::DType::kFloat32);
    auto* bytes = static_cast<uint8_t*>(buffer.data_ptr());
    auto reset_broadcast = [&] {
      for (int64_t i = 0; i < size; ++i) bytes[i] = rank == root ? Expected(root, i) : 0;
    };
    auto count_wrong_broadcast = [&] {
      int64_t wrong = 0;
      for (int64_t i = 0; i < size; ++i) wrong += bytes[i] != Expected(root, i);
      reset_broadcast();
      return SumOverRanks(wrong);
    };
    reset_broadcast();
    const double sdrt_bcast = Time([&] { (void)comm.Broadcast(absl::MakeSpan(&buffer, 1), root); });
    rows.push_back({"broadcast", "sdrt", size, root, sdrt_bcast, 0, 0, count_wrong_broadcast()});
    const double mpi_bcast =
        Time([&] { MPI_Bcast(bytes, static_cast<int>(size), MPI_BYTE, root, MPI_COMM_WORLD); });
    rows.push_back({"broadcast", "mpi", size, root, mpi_bcast, 0, 0, count_wrong_broadcast()});
  }

  nlohmann::json json = nlohmann::json::array();
  if (rank == 0) {
    std::printf("# ranks %d, %d iterations after %d warm-up\n", n, g_iterations, g_warmup);
    std::printf("%-10s %-5s %12s %12s %8s %5s %10s %8s %8s %7s\n", "op", "path", "size", "count",
                "type", "root", "time(us)", "algbw", "busbw", "#wrong");
  }
  for (Row& row : rows) {
    row.algbw = static_cast<double>(row.size) / row.seconds / 1e9;
    row.busbw = row.op == "all_gather" ? row.algbw * (n - 1) / n : row.algbw;
    if (rank != 0) continue;
    std::printf("%s", absl::StrFormat("%-10s %-5s %12d %12d %8s %5d %10.1f %8.2f %8.2f %7d\n",
                                      row.op, row.path, row.size, row.size / 4, "float", row.root,
                                      row.seconds * 1e6, row.algbw, row.busbw, row.wrong)
                          .c_str());
    json.push_back({{"op", row.op},
                    {"path", row.path},
                    {"ranks", n},
                    {"size", row.size},
                    {"count", row.size / 4},
                    {"type", "float"},
                    {"root", row.root},
                    {"time_us", row.seconds * 1e6},
                    {"algbw", row.algbw},
                    {"busbw", row.busbw},
                    {"wrong", row.wrong}});
  }
  if (rank == 0 && !json_path.empty()) std::ofstream(json_path) << json.dump(2) << "\n";
  int64_t total_wrong = 0;
  for (const Row& row : rows) total_wrong += row.wrong;
  world->reset();
  return total_wrong == 0 ? 0 : 1;
}
