// The pieces of one side's description of a tensor (descriptors.h's LeafLayout), as the
// weight-map lowering reads them: a box per rank and local, a peer's boxes checked to lie
// in the tensor before any arithmetic on them. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LAYOUT_PIECES_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LAYOUT_PIECES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"

namespace sdrt::internal {

// One piece of a leaf: the box [offsets, offsets + sizes) on `rank`, its local `local`
// (TransferPiece::local numbering).
struct LayoutPiece {
  int64_t rank = 0;
  int local = 0;
  IntVector offsets, sizes;
};

// Every piece of `layout`: a mesh's per rank (Shard and Replicate placements only), a
// ShardedTensor's boxes, a plain tensor's whole on each of `plain_holders`.
// InvalidArgument prefixed by `where`: other placements, a value that is no tensor, a box
// not of the tensor's dims or outside it.
absl::StatusOr<std::vector<LayoutPiece>> PiecesOfLayout(const LeafLayout& layout,
                                                        const std::vector<int64_t>& plain_holders,
                                                        const std::string& where);

// True when the piece holds no element.
bool EmptyPiece(const LayoutPiece& p);

// How many equal parts `pieces` cut dim `dim` (of size `size`) into: the ranges the
// non-empty pieces hold along it must tile [0, size) with one length (a kShards fused
// tensor's parts). InvalidArgument prefixed by `where` otherwise.
absl::StatusOr<int64_t> EqualParts(const std::vector<LayoutPiece>& pieces, int dim, int64_t size,
                                   const std::string& where);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_LAYOUT_PIECES_H_
