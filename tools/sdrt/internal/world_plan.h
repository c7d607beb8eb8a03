// `sdrt simulate`'s planning: the whole world's reshard plan of a model between two
// parallel layouts (core/checkpoint/parallel_layout.h), made in one process from tensor
// descriptions alone (a checkpoint's headers, a header-only description, or a built-in
// architecture), as PlanReshard makes it on each rank (every rank's moves counted, one
// rank's kept), and once more with every rank's messages for the sync model. No byte moves
// and no other rank runs.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_
#define SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/sync_cost.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::cli {

// The most ranks `sdrt simulate` plans: its time grows with the square of the replicas of a
// piece (4,096 ranks of 1,024 replicas: 10-30 s; 8,192: 78 s, on one core here).
inline constexpr int64_t kMaxSimulatedRanks = 8192;

// The machines the world runs on and their links (internal/engine/sync_cost.h):
// "nodes=16,gpus=8[,nvlink=450GB/s][,nic=50GB/s][,latency=10us][,copy=1000GB/s][,device=gpu]",
// rank r on node r / gpus; device=cpu: the executor on the CPU (ClusterLinks::host, as
// `sdrt bench`'s links row measures it). nodes and gpus are required, whole numbers >= 1 whose
// product is at most kMaxSimulatedRanks; bandwidths are a number with TB/s, GB/s, MB/s or Gb/s from
// 1 MB/s to 1 PB/s, the latency a number with s, ms, us or ns from 0 to 1 s; the others keep
// ClusterLinks' defaults. InvalidArgument naming the text and what is wrong.
absl::StatusOr<internal::ClusterLinks> ParseCluster(const std::string& text);

// The tensor list `model` names: a safetensors file, a Hugging Face folder or a folder of
// safetensors files (header-only descriptions included), or else a built-in architecture of
// `sdrt make --arch` at `scale` (1 when none; its names and shapes, bfloat16; no data is
// made). InvalidArgument for a path that does not exist and is no architecture's name, or
// a scale given with a path; the opening errors of a checkpoint source.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> ModelTensors(const std::string& model,
                                                                std::optional<double> scale);

struct WorldPlanOptions {
  bool disjoint = false;  // the destination's ranks follow the source's
  int64_t rank = 0;       // whose plan's messages are counted as kept
  // The engine's dtype of the weights it casts (std::nullopt: none cast): see
  // CastsToEngineDtype.
  std::optional<DType> dtype_to;
  int64_t bucket_bytes = int64_t{256} << 20;  // the executor's and the bucketed broadcast's
};

// Whether an engine that keeps its weights in a narrower dtype (FP8) casts tensor `name` of
// `shape`: the matrices of its linear layers (two dims or more, named *.weight), not the
// embeddings, the head, the MoE routers (*.gate.weight) or the norms.
bool CastsToEngineDtype(const std::string& name, const IntVector& shape);

struct WorldPlanFigures {
  int64_t ranks = 0;  // the world: ranks of both layouts
  int64_t tensors = 0;
  int64_t tensor_bytes = 0;      // the model's bytes
  int64_t distinct_layouts = 0;  // (dtype, shape, source, destination) pairs walked
  double place_seconds = 0;      // both layouts' ParallelLayout::Place
  // The planner making the plan of WorldPlanOptions::rank (every rank's moves counted, its
  // own kept, as its PlanReshard makes it), and this process's peak once it is made.
  double plan_seconds = 0;
  int64_t peak_rss_bytes = 0;
  // The planner keeping every rank's messages (what the model runs), and the peak then.
  double world_plan_seconds = 0;
  int64_t world_peak_rss_bytes = 0;
  int64_t predict_peak_rss_bytes = 0;  // and once predicted
  // The rank's messages to or from another rank in its plan: stored (once per distinct
  // layout, what its PlanReshard keeps) and sent or received (over every tensor, as
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
  // The sync time the model predicts (sync_cost.h) and how long predicting took.
  internal::SyncPrediction sync;
  internal::BaselinePredictions baselines;
  double predict_seconds = 0;
  // No schedule ends before the busiest NIC or NVLink has moved the bytes the lower
  // bounds above leave it: node_lower_bound_bytes over the node's NICs, lower_bound_bytes
  // over the receiver's NVLink and NIC together (NVLink alone on one node).
  double bound_seconds = 0;
};

// Plans `tensors` from layout `from` (ranks 0..) to layout `to` (ranks 0.. as well, or,
// with options.disjoint, the ranks after from's: an engine beside its trainer) on
// `cluster`, with fan-out by node (a piece that several ranks of a node need enters the
// node once), twice: options.rank's plan, then every rank's messages, from which it
// predicts the sync and the baselines on its links.
// InvalidArgument when the world does not fit the cluster or options.rank is outside it;
// Place's, the planner's and the model's errors.
absl::StatusOr<WorldPlanFigures> PlanWorld(const std::vector<SafetensorsTensorSpec>& tensors,
                                           const ParallelLayout& from, const ParallelLayout& to,
                                           const internal::ClusterLinks& cluster,
                                           const WorldPlanOptions& options);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_WORLD_PLAN_H_
