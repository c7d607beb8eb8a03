// The steps LowerLeafLayouts (lowering.h) is made of, shared by its files: every rank's first
// description of each leaf, the emission of a lowered leaf, and the FP8 leaves no rule fuses
// (fp8_lowering.cc). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_STEPS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_STEPS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/mapping/layout_pieces.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/core/distributed/internal/mapping/segments.h"

namespace sdrt::internal {

// A leaf as the first rank that described it did, and the ranks holding it as a plain tensor.
struct SideInfo {
  const LeafLayout* layout = nullptr;
  int first_rank = 0;
  std::vector<int64_t> plain_holders;
};
using SideKey = std::pair<std::string, bool>;  // path, source side
using LoweringSides = std::map<SideKey, SideInfo>;
// The lowered leaves' descriptions, by the leaf they replace (their anchor).
using AnchoredLeaves = std::map<SideKey, std::vector<LeafLayout>>;
// The index of the dequantized source `name` for a destination of `dtype` in
// MapLowering::dequantized (registered on first use), or -1 when it is not one.
using DequantizeOf = std::function<absl::StatusOr<int>(const std::string& name, DType dtype)>;

// Appends lowered leaf `d` to `out` and its description to `leaves` (its anchor's), once
// checked: its box count, no element twice on a rank, an FP8 leaf's blocks.
absl::Status Emit(LoweredDestination d, const std::string& where, MapLowering& out,
                  std::vector<LeafLayout>& leaves);

// Every rank's description in `per_rank` rewritten: a leaf in `removed` replaced by its
// anchored lowered leaves (where the first rank that described it had it), a renamed one
// going by its source's name (`renames`: destination path -> source name). InvalidArgument
// when ranks describe a replaced leaf differently (the lowering read the first alone).
absl::Status ReplaceLoweredLeaves(const LoweringSides& sides, AnchoredLeaves& anchored,
                                  const std::set<SideKey>& removed,
                                  const std::map<std::string, std::string>& renames,
                                  std::vector<std::vector<LeafLayout>>& per_rank);

// A regroup's source (`source`, fused as SourceSideOf(rule) says): where it holds each of
// the rule's components along its dim, per component in the component's order (a kShards
// source replicating a head: the first part that holds it). InvalidArgument prefixed by
// `where`: its dim not what the sizes make, a kShards layout not of equal parts.
absl::StatusOr<std::vector<std::vector<FusedSegment>>> HeldComponents(
    const WeightMapRule& rule, const SideInfo& source, const std::string& where);

// Elements [component_start, component_start + length) of one component, which a
// destination piece `piece` holds from `local_start` on along out.dim, as boxes of lowered
// leaf `out` where the source holds them (`held`: HeldComponents' for that component).
void PlaceRegrouped(const std::vector<FusedSegment>& held, int64_t component_start,
                    int64_t length, const LayoutPiece& piece, int64_t local_start,
                    LoweredDestination& out);

// The recipe a split's FP8 destinations `names` share (the index of the first's in
// `quantized`; `quantized_of`: a destination path -> its index), -1 when none is FP8.
// Their scales are blocks of the fused source, which are each part's own blocks where every
// part starts at a block (the lowering's checks). InvalidArgument prefixed by `where`: some
// parts FP8 and some not, parts of different recipes (codes, scale dtype, tile), one scale
// per tensor (a part's own amax is not the source's).
absl::StatusOr<int> SplitRecipe(const std::vector<std::string>& names,
                                const std::map<std::string, int>& quantized_of,
                                const std::vector<QuantizedDestination>& quantized,
                                const std::string& where);

// A rule making FP8 destination `q` (with block scales) of FP8 codes sources `names`
// (`components`, each beside its own block scales; `fused`: the destination's description):
// the scales' unit, by the same rule counted in blocks (head size, sizes and rows over the
// block), from the sources' scales into q's. InvalidArgument prefixed by `where`: sources
// not all codes of the destination's dtype, a source without block scales, one scale per
// tensor (components' scales differ: one cannot hold them), a pad, rows or a head size not
// whole blocks.
struct Fp8ScalesUnit {
  WeightMapRule rule;
  std::vector<std::string> sources;
  std::string destination;
};
absl::StatusOr<Fp8ScalesUnit> ScalesLikeTheirCodes(const WeightMapRule& rule,
                                                   const QuantizedDestination& q,
                                                   const std::vector<std::string>& names,
                                                   const std::vector<const SideInfo*>& components,
                                                   const LeafLayout& fused,
                                                   const LoweringSides& sides,
                                                   const std::string& where);

// FP8 leaves (out.quantized) that no rule lowered: onto their source (itself, or
// `renamed_sources`' entry) as they are, a box per piece, views of whole locals, their scale
// leaves no transfer's; skipped where the source holds codes already (they and their scales
// move as they are). InvalidArgument naming the leaf: no source, another shape.
absl::Status LowerPlainQuantized(const LoweringSides& sides,
                                 const std::map<std::string, std::string>& renamed_sources,
                                 bool quantize_on_senders, MapLowering& out,
                                 AnchoredLeaves& anchored, std::set<SideKey>& removed);

// Destinations dequantized from FP8 sources that no rule lowered (dequantize.h), as above;
// then per dequantized source the leaf that brings its scales whole to every rank holding a
// piece of its destinations. InvalidArgument naming the leaf: another shape, a scalar, scales
// that are also a destination leaf's name.
absl::Status LowerDequantized(const LoweringSides& sides,
                              const std::map<std::string, std::string>& renamed_sources,
                              const DequantizeOf& dequantize, MapLowering& out,
                              AnchoredLeaves& anchored, std::set<SideKey>& removed);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LOWERING_STEPS_H_
