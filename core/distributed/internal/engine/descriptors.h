// How a rank describes the leaves it holds to the others, the one codec of leaf
// descriptions: per leaf its path, dtype, global shape and layout (a DTensor's mesh and
// placements, a ShardedTensor's boxes, or a plain tensor it holds whole), or a value that
// travels inline (inline_value.h). A reshard exchanges every rank's description in its
// agreement and MergeLeafLayouts turns them into the same planner descriptors (plan.h) on
// every rank: what two ranks say of one leaf must agree, plain tensors become a Replicate
// layout over the ranks that hold them, and a destination leaf needs a source somewhere. A
// broadcast root sends its full state dict's skeleton the same way (plain tensors and
// inline values). Descriptions are compact (no per-element lists) and decoded with every
// count bounded by what arrived. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_DESCRIPTORS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_DESCRIPTORS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtype.h"
#include "sdrt/tensor/shape.h"

namespace sdrt::internal {

// What one rank says about one leaf on one side.
struct LeafLayout {
  enum class Kind : uint8_t { kMesh, kBoxes, kPlain, kInline };
  std::string path;
  bool source = true;  // else a destination leaf
  DType dtype = DType::kFloat32;
  IntVector shape;  // global
  Kind kind = Kind::kPlain;
  // kMesh: the mesh's shape, global ranks (row-major) and device type, and the placements.
  IntVector mesh_shape;
  std::vector<int64_t> mesh_ranks;
  std::string mesh_device = "cpu";
  std::vector<Placement> placements;
  // kBoxes: every box of the ShardedTensor (its global metadata), in metadata order.
  std::vector<TransferBox> boxes;
  // kInline: the value's CBOR (EncodeInlineValue) when encoding; the decoded value (held
  // apart: a Value is 176 bytes, and a broadcast decodes one LeafLayout per tensor).
  std::string inline_value;
  std::shared_ptr<const Value> value;
};

// Appends to `out` what this rank holds of every tensor leaf of `tree` on one side (a
// DTensor's mesh and placements, a ShardedTensor's boxes, a plain tensor); other leaves are
// not described. CollectLeaves' errors.
absl::Status DescribeStateDict(const Map& tree, bool source, std::vector<LeafLayout>& out);

// The bytes of `leaves`: their count (one word), then each leaf as AppendLeafLayout writes
// it, so that a caller with many leaves can write them one by one.
std::string EncodeLeafLayouts(const std::vector<LeafLayout>& leaves);
// OK when DecodeLeafLayouts takes `leaf`'s dims: InvalidArgument naming its path when its
// shape or its mesh has more than kMaxTransferDims (the describers check each leaf, so that
// a rank learns why, not that a peer's bytes were malformed).
absl::Status CheckLeafDims(const LeafLayout& leaf);
// Appends one leaf's bytes to `out` (of `leaf`, only what its kind uses: the path, side,
// dtype and shape; the mesh and placements for kMesh, the boxes for kBoxes, the inline
// value for kInline).
void AppendLeafLayout(const LeafLayout& leaf, std::string* out);

// The leaves `bytes` (one rank's EncodeLeafLayouts) describe; InvalidArgument naming
// `from` for bytes that are short, long, or hold a count, code or dimension out of range
// (more than kMaxTransferDims dims, kMaxMeshRanks mesh ranks, kMaxTransferBoxes boxes, an
// unknown dtype, placement or reduce op) or an inline value that does not decode.
absl::StatusOr<std::vector<LeafLayout>> DecodeLeafLayouts(absl::string_view bytes, int from);

// Whether two ranks' descriptions of one side of a leaf say the same: MergeLeafLayouts'
// comparison, plain tensors needing the same dtype and shape.
bool SameDescription(const LeafLayout& a, const LeafLayout& b);

// One planner descriptor per leaf some rank holds on the destination side, in the order
// of first mention (rank 0's leaves first), with its source layout. `per_rank[r]` is rank
// r's description. InvalidArgument naming the leaf and ranks when two ranks describe a
// side of a leaf differently (dtype, shape, kind, mesh, placements, boxes), a leaf is plain
// on one rank and sharded on another, source and destination differ in dtype or shape (a
// plain destination leaf takes the source's: it is replaced by the full tensor), or a
// destination leaf has no source on any rank; the
// errors of DeviceMesh::Create for a bad mesh, an inline leaf. Leaves only on the source side are left out
// (`skipped` lists them when not null).
absl::StatusOr<std::vector<TransferTensor>> MergeLeafLayouts(
    const std::vector<std::vector<LeafLayout>>& per_rank,
    std::vector<std::string>* skipped = nullptr);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_DESCRIPTORS_H_
