// A one-process reshard (test code only): runs a plan of plan.h with the real
// packing of pack.h, every rank simulated in this process (a message is "sent" by
// handing its buffer to the destination), and the checks every reshard test makes: each
// destination piece bit-exact against the piece DistributeTensor (or a box narrowed) cuts
// from the full tensor, every needed element delivered once, and wire bytes equal to a
// brute-force optimum computed element by element; and the descriptor builders of the
// reshard tests.
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_SIMULATOR_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_SIMULATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::test {

// A DTensor layout: a mesh of `shape` over `ranks` (empty: 0..N-1) with `placements`
// ("[S(0), R]"). Aborts the test binary on a malformed literal.
inline internal::TransferLayout MeshLayout(IntVector shape, std::vector<int64_t> ranks,
                                          const char* placements) {
  internal::TransferLayout layout;
  layout.mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape, std::move(ranks)));
  layout.placements = *ParsePlacements(placements);
  return layout;
}

inline internal::TransferLayout BoxLayout(std::vector<internal::TransferBox> boxes) {
  internal::TransferLayout layout;
  layout.boxes = std::move(boxes);
  return layout;
}

inline internal::TransferTensor Describe(std::string name, DType dtype, IntVector shape,
                                        internal::TransferLayout source,
                                        internal::TransferLayout destination) {
  return {std::move(name), dtype, std::move(shape), std::move(source), std::move(destination)};
}

// One tensor's locals on every rank: rank -> its locals, indexed by TransferPiece::local.
using RankLocals = std::map<int64_t, std::vector<Tensor>>;

// How a source local is laid out in memory (case-050).
enum class LocalLayout {
  kContiguous,
  kTransposed,  // a view with the dims' strides reversed (stride (1, rows) for 2 dims)
  kNarrowed,    // a narrow() on every dim of a larger buffer
};

// The same values as `local` in a new tensor laid out as `layout`.
absl::StatusOr<Tensor> Relayout(const Tensor& local, LocalLayout layout);

// A tensor of `shape` and a floating dtype (float16, bfloat16, float32, float64) holding
// `values` row-major, each rounded to the dtype (the 16-bit formats through float, which
// rounds them as the exact value would: float keeps more than twice their bits).
Tensor FloatsOf(const IntVector& shape, DType dtype, const std::vector<double>& values);

// Small integers for a Partial(avg) source whose every contribution holds the full value
// (DistributeTensor's fill): element i is (7 i + seed) mod 31 - 15 in a floating dtype, so
// that up to 16 contributions sum exactly and their mean is the value again.
Tensor SmallIntegers(const IntVector& shape, DType dtype, int64_t seed);

// The locals of every piece of `tensor`'s source (`source`) or destination side, cut from
// `full`: DistributeTensor's local for a mesh, the box narrowed for boxes; contiguous.
absl::StatusOr<RankLocals> PieceLocals(const Tensor& full, const internal::TransferTensor& tensor,
                                       bool source);

// Runs `plan`: every message packed from sources[tensor][source rank], handed over and
// unpacked into destinations[tensor][destination rank]. A destination rank without locals
// for a tensor gets new contiguous CPU locals for its pieces; given ones are filled in place.
absl::Status SimulateReshard(const internal::TransferPlan& plan,
                             const std::vector<RankLocals>& sources,
                             std::vector<RankLocals>& destinations);

// The least wire bytes, element by element: over destination pieces and Partial
// contributions, the elements not held by a source piece of the same rank and
// contribution, times the element bits, over 8.
int64_t BruteForceOptimumBytes(const internal::TransferTensorPlan& tensor);

// The least bytes between nodes, element by element (no Partial source): over nodes, the
// elements some destination piece of the node needs that no source piece of the node
// holds, times the element bits, over 8 (ranks past the end of node_of_rank: a node each).
// `duplicates` (when not null) is set when some element is needed by two pieces of one
// rank: then a plan may send it into the node twice (once per piece, as the optimum counts).
int64_t BruteForceInternodeBytes(const internal::TransferTensorPlan& tensor,
                                 const std::vector<int64_t>& node_of_rank,
                                 bool* duplicates = nullptr);

// Plans `tensors` (with fan-out over `node_of_rank` when not empty), builds their source
// locals from `fulls` (laid out as `layout`), simulates, and checks every destination
// piece bit-exact, each element delivered once per Partial contribution, and
// stats.wire_bytes == stats.optimum_bytes == the brute-force optimum; with nodes and no
// Partial source also stats.internode_bytes == the brute-force internode bytes (at least
// them when a rank has two pieces of one element). Returns the plan.
absl::StatusOr<internal::TransferPlan> ReshardAndCheck(
    const std::vector<internal::TransferTensor>& tensors, const std::vector<Tensor>& fulls,
    LocalLayout layout = LocalLayout::kContiguous,
    const std::vector<int64_t>& node_of_rank = {});

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_ENGINE_SIMULATOR_H_
