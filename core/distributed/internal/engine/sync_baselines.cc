// The funnel and the bucketed broadcast of sync_cost.h, priced per tensor from the plan's
// layouts (its pieces), not from its messages: neither scheme moves what the plan moves.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/sync_cost.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// What the schemes need of one layout: bytes rank 0 holds, bytes node 0 holds (its ranks'
// distinct pieces), the destination's ranks and whether they span nodes.
struct LayoutFacts {
  int64_t rank0_bytes = 0;
  int64_t node0_bytes = 0;
  int64_t destinations = 0;
  bool destinations_span_nodes = false;
};

// The cells a piece owns, as a key: equal keys are the same elements (replicas).
std::vector<int64_t> RunsKey(const TransferPiece& piece) {
  std::vector<int64_t> key;
  for (const IndexRuns& dim : piece.runs) {
    for (const IndexRun& run : dim) {
      key.push_back(run.global);
      key.push_back(run.length);
    }
    key.push_back(-1);
  }
  return key;
}

absl::StatusOr<LayoutFacts> FactsOf(const TransferTensorPlan& t, int64_t gpus_per_node) {
  LayoutFacts facts;
  absl::flat_hash_set<std::vector<int64_t>> rank0, node0;
  for (const TransferPiece& piece : t.source()) {
    if (piece.rank >= gpus_per_node) continue;
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(piece.local_shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(t.dtype, numel));
    std::vector<int64_t> key = RunsKey(piece);
    if (piece.rank == 0 && rank0.insert(key).second) facts.rank0_bytes += bytes;
    if (node0.insert(std::move(key)).second) facts.node0_bytes += bytes;
  }
  absl::flat_hash_set<int64_t> ranks;
  for (const TransferPiece& piece : t.destination()) ranks.insert(piece.rank);
  facts.destinations = static_cast<int64_t>(ranks.size());
  const int64_t first_node = ranks.empty() ? 0 : *ranks.begin() / gpus_per_node;
  for (const int64_t r : ranks) {
    facts.destinations_span_nodes |= r / gpus_per_node != first_node;
  }
  // A broadcast from rank 0 (the funnel's root) to ranks off node 0 crosses the NIC too.
  facts.destinations_span_nodes |= first_node != 0;
  return facts;
}

// A pipelined broadcast's start-up: latency per level of a tree over `ranks`.
double Hops(int64_t ranks, double latency) {
  return latency * std::ceil(std::log2(static_cast<double>(std::max<int64_t>(ranks, 2))));
}

}  // namespace

absl::StatusOr<BaselinePredictions> PredictBaselines(const TransferPlan& plan,
                                                     const ClusterLinks& links,
                                                     int64_t bucket_bytes) {
  SDRT_RETURN_IF_ERROR(CheckClusterLinks(links));
  if (bucket_bytes < 1) return absl::InvalidArgumentError("a bucket of no bytes");
  BaselinePredictions out;
  absl::flat_hash_map<const TransferLayoutPlan*, LayoutFacts> facts;
  int64_t model_bytes = 0;
  // The bucketed broadcast reaches every destination rank of the world; from holders on
  // any node of either side.
  absl::flat_hash_set<int64_t> destination_ranks, nodes;
  for (const TransferTensorPlan& t : plan.tensors) {
    auto [it, fresh] = facts.try_emplace(t.layout.get());
    if (fresh) {
      SDRT_ASSIGN_OR_RETURN(it->second, FactsOf(t, links.gpus_per_node));
      for (const TransferPiece& piece : t.source()) nodes.insert(piece.rank / links.gpus_per_node);
      for (const TransferPiece& piece : t.destination()) {
        destination_ranks.insert(piece.rank);
        nodes.insert(piece.rank / links.gpus_per_node);
      }
    }
    const LayoutFacts& f = it->second;
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(t.shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(t.dtype, numel));
    model_bytes += bytes;
    // Funnel: into rank 0 (NVLink and NIC at once), then out to every destination rank.
    const auto over_nvlink = static_cast<double>(f.node0_bytes - f.rank0_bytes);
    const auto over_nic = static_cast<double>(bytes - f.node0_bytes);
    if (bytes > f.rank0_bytes) {
      out.funnel_seconds +=
          std::max(over_nvlink / links.nvlink, over_nic / links.nic) + links.latency;
    }
    const double broadcast = f.destinations_span_nodes ? links.nic : links.nvlink;
    out.funnel_seconds +=
        static_cast<double>(bytes) / broadcast + Hops(f.destinations, links.latency);
  }
  // Bucketed broadcast: every byte once, to every destination rank, buckets pipelined.
  const double broadcast = nodes.size() > 1 ? links.nic : links.nvlink;
  const auto world_destinations = static_cast<int64_t>(destination_ranks.size());
  const int64_t buckets = (model_bytes + bucket_bytes - 1) / bucket_bytes;
  out.bucketed_broadcast_seconds =
      static_cast<double>(model_bytes) / broadcast +
      static_cast<double>(buckets) * Hops(world_destinations, links.latency) +
      static_cast<double>(std::min(model_bytes, bucket_bytes)) / links.copy;
  return out;
}

}  // namespace sdrt::internal
