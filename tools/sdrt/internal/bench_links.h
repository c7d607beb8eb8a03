// The links row of `sdrt bench` (bench_ops.h): the links `sdrt simulate --cluster` takes,
// measured on this machine with every rank working at once, through
// Communicator::Exchange, the call of the executor's exchanges:
//
//   pair     the ranks of each node paired in rank order ((first, second), (third,
//            fourth), ...; an odd one out still calls Exchange, with no message, so that the
//            rhythm holds) swap S = 64 MiB (past the caches) from one preallocated, touched
//            buffer into another (the row's time) and 64 KiB, 200 exchanges per run; a swap
//            of b bytes taking latency + b / pair, pair is the slope of the line through the
//            two (the `nvlink` of the cluster) and latency its intercept (the 64 KiB swap's
//            time less its bytes' share: a sync's messages are that large or larger, and
//            go by MPI's rendezvous, not the eager send of a few bytes);
//   copy     a memcpy of S bytes on every rank at once (the row's flat baseline; fresh: into
//            a new buffer): S / time;
//   nic      when the ranks span hosts (their host names differ), each rank swaps S bytes
//            with the rank at its place on the paired node (nodes (0, 1), (2, 3), ... in
//            order of first appearance): S / (time - latency); on one host the pair's.
//
// Each time is the median over the timed runs of the slowest rank's (bench_timing.h). The
// cluster is the hosts as nodes of the most ranks any host has. #wrong counts the swapped
// bytes that differ from the partner's; the flat baseline's check is the copy's.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_LINKS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_LINKS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/tools/sdrt/internal/bench_rows.h"

namespace sdrt::cli {

// Byte j of the buffers rank `rank` sends in the baselines of the links and sync_layout
// rows, so that a receiver can check what it got.
uint8_t BenchByte(int rank, int64_t j);

// The links row over `world` (MPI_COMM_WORLD's ranks). Errors, the same on every rank:
// InvalidArgument on one rank (no partner); ResourceExhausted for a buffer that cannot be
// had; Internal for a figure outside what `sdrt simulate` takes (a bandwidth outside 1 MB/s
// to 1 PB/s, a latency above 1 s); the communicator's.
absl::StatusOr<BenchRow> MeasureLinks(Communicator& world, const BenchSettings& settings);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_LINKS_H_
