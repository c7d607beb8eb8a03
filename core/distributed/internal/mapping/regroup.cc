// The regroup rule's half of the lowering (weight_map.h, kRegroup): where a fused source
// holds each component, and a destination piece's rows of one component placed there as
// boxes of the lowered leaf in the source's coordinates.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/layout_pieces.h"
#include "sdrt/core/distributed/internal/mapping/lowering_steps.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

using Interleave = WeightMapRule::Interleave;

absl::StatusOr<std::vector<std::vector<FusedSegment>>> HeldComponents(
    const WeightMapRule& rule, const SideInfo& source, const std::string& where) {
  const WeightMapRule side = SourceSideOf(rule);
  const IntVector& shape = source.layout->shape;
  const bool no_elements =
      std::any_of(shape.begin(), shape.end(), [](int64_t n) { return n == 0; });
  int64_t parts = 1;
  if (!no_elements && side.interleave == Interleave::kShards) {
    SDRT_ASSIGN_OR_RETURN(const std::vector<LayoutPiece> pieces,
                          PiecesOfLayout(*source.layout, source.plain_holders, where));
    SDRT_ASSIGN_OR_RETURN(parts, EqualParts(pieces, rule.dim, shape[rule.dim], where));
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<FusedSegment> segments,
                        FusedSegments(side, rule.sizes, shape[rule.dim], parts,
                                      absl::StrCat(where, ", its source")));
  std::vector<std::vector<FusedSegment>> held;
  for (size_t k = 0; k < rule.sizes.size(); ++k) {
    held.push_back(FirstOfEach(segments, static_cast<int>(k)));
  }
  return held;
}

void PlaceRegrouped(const std::vector<FusedSegment>& held, int64_t component_start,
                    int64_t length, const LayoutPiece& piece, int64_t local_start,
                    LoweredDestination& out) {
  const int dim = out.dim;
  const int64_t end = component_start + length;
  // `held` lies in the component's order: only those from the one holding the start on.
  auto at = std::upper_bound(
      held.begin(), held.end(), component_start,
      [](int64_t x, const FusedSegment& t) { return x < t.offset + t.length; });
  for (; at != held.end() && at->offset < end; ++at) {
    const int64_t x0 = std::max(component_start, at->offset);
    const int64_t x1 = std::min(end, at->offset + at->length);
    TransferBox box{piece.offsets, piece.sizes, piece.rank};
    box.offsets[dim] = at->fused + (x0 - at->offset);
    box.sizes[dim] = x1 - x0;
    out.boxes.push_back(std::move(box));
    out.views.push_back({0, piece.rank, piece.local, local_start + (x0 - component_start),
                         x1 - x0});
  }
}

}  // namespace sdrt::internal
