// The files and the floor of bench/load_bench.cc: the two workloads written as safetensors
// files, and the byte runs a rank keeps of a file under a 1-D plan, computed from the header
// alone with PyTorch's chunking (independently of core/distributed/internal/load/read_plan.cc, so
// that the floor also checks LoadStateDict's bytes_kept).
#ifndef SDRT_BENCH_LOAD_WORKLOADS_H_
#define SDRT_BENCH_LOAD_WORKLOADS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/dtensor/device_mesh.h"

namespace sdrt::bench {

// Writes workload `which` to `path` (atomically, one tensor at a time):
//   "llama": Llama-3-8B's 291 tensors with every size divided by 4 except the head counts
//            and the layer count (hidden 1024 = 32 heads x 32, 8 kv heads: k/v 256 x 1024,
//            intermediate 3584, vocab 32064), bfloat16, 1.00 GB;
//   "small": `sdrt bench`'s 10,000 float32 1-D tensors of 64..1024 elements
//            ("block.{i/100}.param{i%100}"), 20.8 MiB (tools/sdrt/internal/bench_workloads.h);
//   "small100k": the same formula for 100,000 tensors, 208 MiB (the per-tensor cost at 10x
//            the count: a path without anything quadratic takes about 10x small's time).
// Bytes: splitmix64 per tensor and word, as `sdrt bench`'s. `sdrt make
// --arch llama-8b --scale S` cannot make the first: --scale also scales the layer count, so
// only S = 1 (16 GB) keeps 291 tensors. InvalidArgument for another name.
absl::Status WriteWorkload(const std::string& which, const std::string& path);

// One byte run of a file.
struct ByteRun {
  int file = 0;
  int64_t offset = 0;
  int64_t bytes = 0;
};

// The bytes `rank` keeps of every tensor of `source` when `plan` places it on the 1-D
// `mesh`: a Shard(d) piece is torch.chunk's chunk `rank` of dim d (one run per index of
// the dims before d), Replicate the whole tensor; in the order of source.tensors() (file
// order), runs that touch joined (the fewest preads that read exactly these bytes), so the
// runs read back to back are the rank's pieces, contiguous, in that order. InvalidArgument for a
// mesh of more than one dim or a placement other than Shard and Replicate.
absl::StatusOr<std::vector<ByteRun>> KeptRuns(const CheckpointSource& source,
                                              const ShardingPlan& plan, const DeviceMesh& mesh,
                                              int rank);

// Reads every run into `out` back to back (pread, EINTR retried, short counts continued);
// returns the pread calls. `fds` are the source's files, open for reading. With `threads`
// > 1 the runs' bytes are cut into that many equal ranges, each read by a thread of its own
// (the multi-threaded floor of LoadOptions::readers).
absl::StatusOr<int64_t> PreadRuns(const std::vector<int>& fds, const std::vector<ByteRun>& runs,
                                  uint8_t* out, int threads = 1);

// The fraction of `path`'s pages in the page cache (mincore over a mapping of it).
absl::StatusOr<double> ResidentFraction(const std::string& path);

}  // namespace sdrt::bench

#endif  // SDRT_BENCH_LOAD_WORKLOADS_H_
