// scattered_pieces_bench: the floor of moving many small pieces between separate
// allocations over MPI, which is what a gather or broadcast into thousands of separate
// tensors must do (bench/RESULTS.md, issue 16). Ranks pair up (rank r with r ^ 1); each
// sends its N pieces (separate allocations, 512..1,664 bytes each, about the per-rank pieces
// of `sdrt bench --workload small`) to its partner, which receives them into N other
// separate allocations, four ways, timed in the same run:
//
//   flat      one message of the same bytes from one buffer into one buffer (the floor
//             without separate tensors: the flat collective's part);
//   packed    packed into one buffer, one message, unpacked (what sdrt's reshard executor
//             and its bound path do for pieces under 64 KiB);
//   hindexed  one message described by MPI_Type_create_hindexed on both sides, no copy of
//             ours (MPI's datatype engine reads and writes the pieces);
//   messages  one MPI_Isend / MPI_Irecv per piece (one tag: MPI keeps a pair's messages in
//             order).
//
// Prints each way's median ms over the timed runs (the slowest rank's per run), its
// [min..max], its ratio to flat, and #wrong (bytes received that differ from what was sent,
// summed over ranks, checked after each way's runs). Run under `mpiexec -n N` with N even.
// Flags: --pieces N (default 10000), --iters K (default 9), --warmup K (default 2).
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sdrt/bench/mpi_bench_util.h"

namespace {

using sdrt::bench::Reduce;
using sdrt::bench::Spread;
using sdrt::bench::Summarize;

// The byte at `index` of piece `piece` sent by rank `rank`.
uint8_t Expected(int rank, int64_t piece, int64_t index) {
  return static_cast<uint8_t>((piece * 131 + index * 7 + rank * 31 + 5) & 0xff);
}

struct Pieces {
  std::vector<std::unique_ptr<uint8_t[]>> send, receive;  // one allocation per piece
  std::vector<int> bytes;
  int64_t total = 0;
};

Pieces MakePieces(int rank, int64_t n) {
  Pieces p;
  for (int64_t i = 0; i < n; ++i) {
    const int bytes = 512 + static_cast<int>((i * 2654435761u) % 9) * 144;  // 512..1,664
    p.bytes.push_back(bytes);
    p.send.emplace_back(new uint8_t[bytes]);
    p.receive.emplace_back(new uint8_t[bytes]());
    for (int j = 0; j < bytes; ++j) p.send.back()[j] = Expected(rank, i, j);
    p.total += bytes;
  }
  return p;
}

// Times `run` (after `warmup` untimed calls) `iters` times; each run's time is the
// slowest rank's.
Spread Time(const std::function<void()>& run, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) run();
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    run();
    times.push_back(Reduce((MPI_Wtime() - start) * 1e3, MPI_MAX));
  }
  return Summarize(times);
}

int ParseInt(const char* text, int low, int high, const char* what) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < low || v > high) {
    std::fprintf(stderr, "scattered_pieces_bench: %s must be in [%d, %d]\n", what, low, high);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  sdrt::bench::BenchRank() = rank;
  int n = 10000, iters = 9, warmup = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--pieces") {
      n = ParseInt(argv[i + 1], 1, 1000000, "--pieces");
    } else if (flag == "--iters") {
      iters = ParseInt(argv[i + 1], 1, 100000, "--iters");
    } else if (flag == "--warmup") {
      warmup = ParseInt(argv[i + 1], 0, 100000, "--warmup");
    } else {
      if (rank == 0) std::fprintf(stderr, "scattered_pieces_bench: unknown flag %s\n", argv[i]);
      MPI_Finalize();
      return 2;
    }
  }
  if (size % 2 != 0) {
    if (rank == 0) std::fprintf(stderr, "scattered_pieces_bench: run it on an even rank count\n");
    MPI_Finalize();
    return 2;
  }
  const int peer = rank ^ 1;
  Pieces p = MakePieces(rank, n);
  std::vector<uint8_t> flat_send(static_cast<size_t>(p.total)), bucket(flat_send.size()),
      landing(flat_send.size());
  for (int64_t i = 0, at = 0; i < n; at += p.bytes[i], ++i) {
    std::memcpy(flat_send.data() + at, p.send[i].get(), static_cast<size_t>(p.bytes[i]));
  }
  const auto exchange = [&](const void* out, void* in, int count, MPI_Datatype type) {
    MPI_Request r[2];
    MPI_Irecv(in, count, type, peer, 0, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(out, count, type, peer, 0, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
  };
  const int total = static_cast<int>(p.total);  // < 2 GiB: n <= 1e6 pieces of <= 1,664 bytes
  std::vector<MPI_Aint> send_at(n), receive_at(n);
  std::vector<MPI_Request> requests(2 * static_cast<size_t>(n));
  struct Way {
    const char* name;
    std::function<void()> run;
  };
  const std::vector<Way> ways = {
      {"flat", [&] { exchange(flat_send.data(), landing.data(), total, MPI_BYTE); }},
      {"packed",
       [&] {
         for (int64_t i = 0, at = 0; i < n; at += p.bytes[i], ++i) {
           std::memcpy(bucket.data() + at, p.send[i].get(), static_cast<size_t>(p.bytes[i]));
         }
         exchange(bucket.data(), landing.data(), total, MPI_BYTE);
         for (int64_t i = 0, at = 0; i < n; at += p.bytes[i], ++i) {
           std::memcpy(p.receive[i].get(), landing.data() + at, static_cast<size_t>(p.bytes[i]));
         }
       }},
      {"hindexed",
       [&] {
         for (int i = 0; i < n; ++i) {
           MPI_Get_address(p.send[i].get(), &send_at[i]);
           MPI_Get_address(p.receive[i].get(), &receive_at[i]);
         }
         MPI_Datatype out, in;
         MPI_Type_create_hindexed(n, p.bytes.data(), send_at.data(), MPI_BYTE, &out);
         MPI_Type_create_hindexed(n, p.bytes.data(), receive_at.data(), MPI_BYTE, &in);
         MPI_Type_commit(&out);
         MPI_Type_commit(&in);
         MPI_Request r[2];
         MPI_Irecv(MPI_BOTTOM, 1, in, peer, 0, MPI_COMM_WORLD, &r[0]);
         MPI_Isend(MPI_BOTTOM, 1, out, peer, 0, MPI_COMM_WORLD, &r[1]);
         MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
         MPI_Type_free(&out);
         MPI_Type_free(&in);
       }},
      {"messages",
       [&] {
         for (int i = 0; i < n; ++i) {
           MPI_Irecv(p.receive[i].get(), p.bytes[i], MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                     &requests[static_cast<size_t>(i)]);
         }
         for (int i = 0; i < n; ++i) {
           MPI_Isend(p.send[i].get(), p.bytes[i], MPI_BYTE, peer, 0, MPI_COMM_WORLD,
                     &requests[static_cast<size_t>(n + i)]);
         }
         MPI_Waitall(2 * n, requests.data(), MPI_STATUSES_IGNORE);
       }},
  };
  if (rank == 0) {
    std::printf("# %d ranks in pairs, %d pieces of 512..1,664 bytes per rank (%.2f MB)\n", size, n,
                static_cast<double>(p.total) / 1e6);
    std::printf("%-10s %10s %18s %10s %8s\n", "way", "ms", "[min..max]", "/ flat", "#wrong");
  }
  double flat_ms = 0;
  for (const Way& way : ways) {
    const Spread s = Time(way.run, warmup, iters);
    if (flat_ms == 0) flat_ms = s.median;
    int64_t wrong = 0;
    for (int64_t i = 0, at = 0; i < n; at += p.bytes[i], ++i) {
      const uint8_t* got =
          std::string(way.name) == "flat" ? landing.data() + at : p.receive[i].get();
      for (int j = 0; j < p.bytes[i]; ++j) wrong += got[j] != Expected(peer, i, j);
    }
    for (int i = 0; i < n; ++i) std::memset(p.receive[i].get(), 0, static_cast<size_t>(p.bytes[i]));
    wrong = Reduce(wrong, MPI_SUM);
    if (rank == 0) {
      char spread[64];
      std::snprintf(spread, sizeof(spread), "[%.2f..%.2f]", s.min, s.max);
      std::printf("%-10s %10.2f %18s %10.2f %8lld\n", way.name, s.median, spread,
                  s.median / flat_ms, static_cast<long long>(wrong));
    }
  }
  MPI_Finalize();
  return 0;
}
