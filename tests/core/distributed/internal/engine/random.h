// Random reshard layouts for the seeded fuzz of the planner (reshard_fuzz_test.cc) and its
// run under mpiexec (reshard_mpi_test.cc): meshes of 1-3 axes over random subsets of a
// world with Shard, Replicate, _StridedShard and optionally Partial placements, and
// ChunkShardingSpec boxes, some held twice.
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_RANDOM_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_RANDOM_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sdrt/core/distributed/internal/engine/plan.h"

namespace sdrt::test {

// A seeded generator: the same seed gives the same sequence on every rank and machine
// (std::mt19937_64 and uniform_int_distribution of libstdc++).
class Random {
 public:
  explicit Random(uint64_t seed) : engine_(seed) {}
  int64_t Uniform(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  bool Chance(int percent) { return Uniform(0, 99) < percent; }
  // n of the ranks first, first + 1, ..., first + world - 1, in random order.
  std::vector<int64_t> Subset(int64_t world, int64_t n, int64_t first = 0);

 private:
  std::mt19937_64 engine_;
};

// A mesh over 1 to `world` of the ranks first .. first + world - 1 for a tensor of `ndim`
// dims; with `partial`, some mesh dims may be Partial(*partial).
internal::TransferLayout RandomMesh(Random& rng, int64_t world, int ndim, int64_t first = 0,
                                   const ReduceOp* partial = nullptr);

// ChunkShardingSpec boxes of a tensor of `shape` over random ranks of `world`, sometimes
// with a box held twice.
internal::TransferLayout RandomBoxes(Random& rng, int64_t world, const IntVector& shape);

// "DeviceMesh(...) [S(0), R]" or "boxes {[0]+[2]@1 ...}", for failure messages.
std::string LayoutString(const internal::TransferLayout& layout);

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_RANDOM_H_
