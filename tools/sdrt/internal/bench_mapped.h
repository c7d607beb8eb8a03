// What the mapped rows of `sdrt bench` share (bench_mapped.cc, bench_regroup.cc): the
// engine's buffers, the workload's engine layout by plain slicing, and the byte compare of
// the checks. Not public API.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_MAPPED_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_MAPPED_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"

namespace sdrt::cli {

// The Llama workload's attention head size (hidden 512 = 32 heads x 16).
inline constexpr int64_t kLlamaHeadSize = 16;

// Zeroed DTensors of `specs` under the tp plan on `mesh`, views of one allocation.
absl::StatusOr<Map> EngineBuffers(const std::vector<SafetensorsTensorSpec>& specs,
                                  const ShardingPlan& tp, std::shared_ptr<const DeviceMesh> mesh,
                                  int rank);
// Rows [r * n / parts, (r + 1) * n / parts) of `full` (n rows, divisible by parts).
absl::StatusOr<Tensor> Part(const Tensor& full, int64_t parts, int64_t r);
// The sources a fused engine tensor is made of (none for any other).
std::vector<std::string> ComponentsOf(const std::string& name);
// Bytes of `got` that differ from `want`'s (all of them when they cannot be compared).
int64_t DifferingBytes(const Tensor& got, const Tensor& want);

// The engine's layout of the workload on this rank, as plain slicing makes it.
struct BenchRunner::MappedSync {
  WeightMap map;
  std::optional<ShardingPlan> tp;
  int64_t parts = 1;
  std::vector<SafetensorsTensorSpec> specs;         // the workload's
  std::vector<SafetensorsTensorSpec> mapped_specs;  // the engine's
  std::map<std::string, size_t> index;

  const Tensor& Full(const BenchWorkload& w, const std::string& name) const {
    return w.full[index.at(name)];
  }
  // Engine tensor `s`'s local on `rank` (in the workload's dtype), from the full tensors.
  absl::StatusOr<Tensor> Expected(const BenchWorkload& w, const SafetensorsTensorSpec& s,
                                  const std::vector<Placement>& placements,
                                  const std::shared_ptr<const DeviceMesh>& mesh, int rank) const {
    const std::vector<std::string> components = ComponentsOf(s.name);
    if (!components.empty()) {
      // [component 0's rank piece; component 1's; ...] (kv heads >= ranks: no replication).
      std::vector<Tensor> pieces;
      int64_t rows = 0;
      for (const std::string& c : components) {
        SDRT_ASSIGN_OR_RETURN(pieces.emplace_back(), Part(Full(w, c), parts, rank));
        rows += pieces.back().size(0);
      }
      SDRT_ASSIGN_OR_RETURN(Tensor want, Tensor::Empty({rows, s.shape[1]}, pieces[0].dtype()));
      int64_t at = 0;
      for (const Tensor& piece : pieces) {
        SDRT_ASSIGN_OR_RETURN(Tensor into, want.Narrow(0, at, piece.size(0)));
        SDRT_RETURN_IF_ERROR(into.CopyFrom(piece));
        at += piece.size(0);
      }
      return want;
    }
    const Tensor& full = Full(w, s.name);
    if (s.shape != full.shape()) {
      // A padded vocabulary: the full tensor with zero rows after it, then this rank's rows.
      SDRT_ASSIGN_OR_RETURN(Tensor padded, Tensor::Zeros(s.shape, full.dtype()));
      SDRT_ASSIGN_OR_RETURN(Tensor head, padded.Narrow(0, 0, full.size(0)));
      SDRT_RETURN_IF_ERROR(head.CopyFrom(full));
      return Part(padded, parts, rank);
    }
    SDRT_ASSIGN_OR_RETURN(const DTensor d, DistributeTensor(full, mesh, placements, rank));
    return d.local();
  }
};

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_MAPPED_H_
