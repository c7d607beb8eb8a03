// `sdrt simulate`'s planning: the whole world's reshard plan of a model between two
// parallel layouts (core/checkpoint/parallel_layout.h), made in one process from tensor
// descriptions alone (a checkpoint's headers, a header-only description, or a built-in
// architecture), as PlanReshard makes it on each rank: every rank's moves counted, one
// rank's kept. No byte moves and no other rank runs.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_
#define SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::cli {

// The most ranks `sdrt simulate` plans: its time grows with the square of the replicas of a
// piece (4,096 ranks of 1,024 replicas: 10-30 s; 8,192: 78 s, on one core here).
inline constexpr int64_t kMaxSimulatedRanks = 8192;

// The machines the world runs on: `nodes` x `gpus` ranks, rank r on node r / gpus.
struct ClusterShape {
  int64_t nodes = 1;
  int64_t gpus = 1;  // ranks per node
};

// "nodes=16,gpus=8" (both required, whole numbers >= 1, product <= kMaxSimulatedRanks).
// InvalidArgument naming the text and what is wrong.
absl::StatusOr<ClusterShape> ParseClusterShape(const std::string& text);

// The tensor list `model` names: a safetensors file, a Hugging Face folder or a folder of
// safetensors files (header-only descriptions included), or else a built-in architecture of
// `sdrt make --arch` at `scale` (its names and shapes, bfloat16; no data is made).
// InvalidArgument for a path that does not exist and is no architecture's name, or a scale
// other than 1 with a path; the opening errors of a checkpoint source.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> ModelTensors(const std::string& model,
                                                                double scale);

struct WorldPlanFigures {
  int64_t ranks = 0;  // the world: ranks of both layouts
  int64_t tensors = 0;
  int64_t tensor_bytes = 0;      // the model's bytes
  int64_t distinct_layouts = 0;  // (dtype, shape, source, destination) pairs walked
  double place_seconds = 0;      // both layouts' ParallelLayout::Place
  double plan_seconds = 0;       // the planner
  int64_t peak_rss_bytes = 0;    // of this process, at the end
  // The planned rank's messages to or from another rank: stored (once per distinct layout,
  // what its PlanReshard keeps) and sent or received (over every tensor, as
  // stats.messages counts every rank's).
  int64_t kept_messages = 0;
  int64_t rank_messages = 0;
  internal::TransferPlanStats stats;  // every rank's moves
  // The least bytes the busiest rank must move: what the busiest receiver's pieces need and
  // it does not hold (stats.max_received_bytes).
  int64_t lower_bound_bytes = 0;
  // The least inter-node bytes the busiest node must move: the larger of what the busiest
  // node must take in (stats.max_node_received_bytes: with fan-out each piece enters a node
  // once) and the inter-node bytes over the nodes the world uses.
  int64_t node_lower_bound_bytes = 0;
};

// Plans `tensors` from layout `from` (ranks 0..) to layout `to` (ranks 0.. as well, or,
// with `disjoint`, the ranks after from's: an engine beside its trainer) on `cluster`,
// keeping `rank`'s messages, with fan-out by node (a piece that several ranks of a node
// need enters the node once). InvalidArgument when the world does not fit the cluster or
// `rank` is outside it; Place's and the planner's errors.
absl::StatusOr<WorldPlanFigures> PlanWorld(const std::vector<SafetensorsTensorSpec>& tensors,
                                           const ParallelLayout& from, const ParallelLayout& to,
                                           bool disjoint, const ClusterShape& cluster,
                                           int64_t rank);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_
