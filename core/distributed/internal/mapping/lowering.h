// A weight map lowered to ordinary transfers over views (docs/PLAN.md, "Engine layouts"):
// no new planner, and the source side is never touched (a checkpoint's tensors, a
// trainer's leaves stay what they are). Every destination leaf a rule makes is described
// instead in its source's coordinates: one ShardedTensor leaf per source tensor, named as
// it, whose boxes are where the destination's pieces hold that source's elements and whose
// local shards are views of the destination's locals:
//   fuse  the fused destination becomes one leaf per component source (the rows of each
//         part or group that hold it), views into the fused locals;
//   split the component destinations become one leaf of the fused source (each
//         component piece's rows placed where the fused tensor holds them), views into
//         the components' locals;
//   regroup the fused destination becomes one leaf of the fused source (each component
//         piece's rows placed where the source holds them), views into the fused locals;
//   pad   the padded destination becomes a leaf of the source's shape (its pieces clipped
//         to the source), the rest of each local zeroed;
//   rename the destination leaf goes by the source's name.
// The engine then moves these leaves like any (casts included) and the views put the bytes
// in place. A load lowers its destination the same way, the checkpoint being the source.
//
// On every rank alike, from every rank's description: LowerLeafLayouts rewrites the
// destination descriptions before MergeLeafLayouts (descriptors.h) and keeps what it did
// in a MapLowering; for each call, LowerLocals makes this rank's lowered leaves over its
// destination locals for FindTransferLocals (locals.h). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/engine/locals.h"
#include "sdrt/core/distributed/internal/mapping/dequantize.h"
#include "sdrt/core/distributed/internal/mapping/quantize.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

// Box i of a lowered leaf: elements [start, start + length) along the rule's dim of local
// `local` (TransferPiece::local numbering) of destination leaf `leaf` on `rank`.
struct LoweredView {
  int leaf = 0;  // index into LoweredDestination::leaves
  int64_t rank = 0;
  int local = 0;
  int64_t start = 0;
  int64_t length = 0;
};

struct LoweredDestination {
  std::string name;  // the plan tensor's name: the source's
  DType dtype = DType::kFloat32;  // the destination's
  IntVector shape;   // the source's global shape
  int dim = 0;
  std::vector<std::string> leaves;  // the destination leaves its views are in (by path)
  std::vector<TransferBox> boxes;   // every rank's
  std::vector<LoweredView> views;   // one per box
  bool zero_rest = false;           // a pad: what no view covers in its leaf is zeroed
  // An FP8 leaf (quantize.h): the index of its MapLowering::quantized, -1 for none. `dtype`
  // is then its codes' when the senders quantize, else the source's (its views go into
  // staging locals).
  int quantized = -1;
  DType source_dtype = DType::kFloat32;  // the source's (set for FP8 leaves)
  // A destination of fp8 codes dequantized (dequantize.h): the index of its source in
  // MapLowering::dequantized, -1 for none; `dtype` is the codes' (its views go into staging
  // locals). Or (scale_of) the leaf that brings that source's scales whole to the ranks that
  // need them: no views, one box per such rank, fresh locals.
  int dequantized = -1;
  int scale_of = -1;
};

// A destination leaf that goes by its source's name.
struct RenamedDestination {
  std::string name;  // the source's
  std::string path;  // the destination's
  DType dtype = DType::kFloat32;  // the source's, and its shape: a plain leaf's new tensor
  IntVector shape;
};

struct MapLowering {
  std::vector<LoweredDestination> destinations;
  std::vector<RenamedDestination> renamed;
  std::vector<QuantizedDestination> quantized;
  bool on_senders = false;  // the senders quantize (a reshard), else each rank after (a load)
  std::vector<DequantizedSource> dequantized;
  bool empty() const { return destinations.empty() && renamed.empty() && quantized.empty(); }
};

// Applies `map` to `per_rank` (every rank's description, as PlanReshard decoded them; a
// rank's list may be empty), in place: each destination leaf a rule makes is replaced by
// its lowered leaves (where the first rank that described it had it; every other rank's
// description of it is dropped, once checked to be the first's), or renamed. A rule whose
// destination no rank holds (a split: none of them) is left out, as an unwanted source is.
// InvalidArgument naming the rule and tensor, the same on every rank: a fuse missing a
// component, two sources for one component or two rules making one destination; a name a
// lowered leaf takes that a destination leaf has already; a split some of whose
// destinations no rank holds while others do; ranks describing a replaced leaf differently;
// a peer's box outside its tensor; shapes that do not fit (other dims differing, a fused size that is not the components'
// sum (times the parts), a head size or group count that does not divide, a pad that is
// not the source's size rounded up to the multiple), a split's components of different
// dtypes; a fused layout that is not one box per local (_StridedShard, Partial), or that
// kShards cannot cut into equal parts; a rank holding one element of a lowered leaf twice.
// FP8 leaves are quantized by the senders when `quantize_on_senders` (quantize.h).
absl::StatusOr<MapLowering> LowerLeafLayouts(const WeightMap::Compiled& map,
                                            std::vector<std::vector<LeafLayout>>& per_rank,
                                            bool quantize_on_senders);

// Rank `me`'s lowered leaves over its locals of `destination` (on `device`), into
// out.destinations: ShardedTensors whose local shards are views, and renamed leaves under
// their plan names. A destination DTensor with a meta local, or a plain meta leaf (or one renamed), gets
// a new compact local here (out.fresh, installed by InstallFreshLocals); what a pad's views
// leave uncovered is zeroed. InvalidArgument naming the leaf when one this rank holds a
// piece of is missing or its local does not fit; allocation errors.
absl::Status LowerLocals(const MapLowering& lowering, int64_t me, Device device, Map& destination,
                         MappedLeaves& out);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_H_
