// A weight map lowered to ordinary transfers over views (docs/PLAN.md, "Engine layouts"):
// no new planner. A rule's fused side (a fuse's or pad's destination, a split's source)
// becomes one leaf per component, a ShardedTensor whose boxes are where the fused tensor's
// pieces hold that component, in the component's own coordinates; the other side keeps its
// leaves (a rename just renames the source leaf). The engine then moves components like
// any tensors, casts included, and the views put their bytes in place.
//
// On every rank alike, from every rank's description: LowerLeafLayouts rewrites the
// descriptions before MergeLeafLayouts (descriptors.h) and keeps what it did in a
// MapLowering. Each call of the plan: LowerLocals makes this rank's component leaves over
// its fused locals (views) for FindTransferLocals (locals.h). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/engine/locals.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

// Box i of a component: elements [start, start + length) along the rule's dim of local
// `local` (TransferPiece::local numbering) of the fused leaf on `rank`.
struct ComponentView {
  int64_t rank = 0;
  int local = 0;
  int64_t start = 0;
  int64_t length = 0;
};

struct LoweredComponent {
  std::string name;  // the plan tensor's name: the component's name on its unfused side
  IntVector shape;   // its global shape
  std::vector<TransferBox> boxes;    // every rank's, as the lowered ShardedTensor lists them
  std::vector<ComponentView> views;  // one per box
};

// One fused leaf made into component leaves.
struct LoweredLeaf {
  std::string path;  // the fused leaf's path on its side
  bool source = false;
  DType dtype = DType::kFloat32;
  int dim = 0;
  std::vector<LoweredComponent> components;
};

struct MapLowering {
  std::vector<LoweredLeaf> fused;
  // Renamed sources: (plan name = the destination's path, the source leaf's path).
  std::vector<std::pair<std::string, std::string>> renamed;
  bool empty() const { return fused.empty() && renamed.empty(); }
};

// Applies `map` to `per_rank` (every rank's description, as PlanReshard decoded them), in
// place: a source the map takes is renamed, or a fused leaf replaced by its components
// (where the first rank that described it had it; every other rank's description of it is
// dropped). A rule whose destination no rank holds is left out, as an unwanted source is.
// InvalidArgument naming the rule and tensor, the same on every rank: a fuse missing a
// component, two sources for one component or two rules making one destination; a name a
// component or rename takes already held on that side; a split's destination that no rank
// holds; shapes that do not fit (other dims differing, a fused size that is not the
// components' sum (times the parts), a head size or group count that does not divide, a
// pad that is not the source's size rounded up to the multiple); a fused layout that is
// not one box per local (_StridedShard, Partial), or that kShards cannot cut into equal
// parts; two components of one rank at the same box.
absl::StatusOr<MapLowering> LowerLeafLayouts(const WeightMap::Compiled& map,
                                            std::vector<std::vector<LeafLayout>>& per_rank);

// Rank `me`'s component leaves over its fused locals in `source` and `destination` (on
// `device`), into out.mapped: ShardedTensors whose local shards are views of the fused
// locals, and the renamed sources' values under their plan names. A fused destination
// DTensor with a meta local gets a new compact local here (out.mapped.fresh, installed by
// InstallFreshLocals); its elements that no component covers (a pad's) are zeroed.
// InvalidArgument naming the leaf when a fused leaf this rank holds a piece of is missing
// or its local does not fit; allocation errors.
absl::Status LowerLocals(const MapLowering& lowering, int64_t me, Device device, const Map& source,
                         Map& destination, MappedLeaves& out);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_
