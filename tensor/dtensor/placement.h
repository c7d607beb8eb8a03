// Placements of a DTensor on one mesh dimension, as torch.distributed.tensor has them:
// Shard(dim), Replicate(), Partial(reduce_op) and the private _StridedShard(dim,
// split_factor) that FSDP2 over TP produces. Printed and parsed as PyTorch prints them:
// "S(0)", "R", "P(sum)", "_S(0, 2)". The sharding arithmetic lives with DTensor.
#ifndef SDRT_TENSOR_DTENSOR_PLACEMENT_H_
#define SDRT_TENSOR_DTENSOR_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sdrt/tensor/reduce_op.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

// The largest _StridedShard split factor sdrt accepts: 2^20. FSDP2 over TP sets it to the
// product of mesh dim sizes, so it never exceeds a mesh's rank count (kMaxMeshRanks, the
// same 2^20); the bound keeps a hostile file's 9e18 from reaching any arithmetic.
inline constexpr int64_t kMaxSplitFactor = int64_t{1} << 20;

class Placement {
 public:
  enum class Kind : uint8_t { kReplicate, kShard, kPartial, kStridedShard };

  static Placement Replicate() { return Placement(Kind::kReplicate, 0, 1, ReduceOp::kSum); }
  // Tensor dim `dim` split over the mesh dim with torch.chunk semantics (dim >= 0).
  static Placement Shard(int dim) { return Placement(Kind::kShard, dim, 1, ReduceOp::kSum); }
  static Placement Partial(ReduceOp op = ReduceOp::kSum) {
    return Placement(Kind::kPartial, 0, 1, op);
  }
  // _StridedShard(dim, split_factor); split_factor 1 behaves as Shard(dim).
  static Placement StridedShard(int dim, int64_t split_factor) {
    return Placement(Kind::kStridedShard, dim, split_factor, ReduceOp::kSum);
  }

  Kind kind() const { return kind_; }
  bool is_replicate() const { return kind_ == Kind::kReplicate; }
  bool is_partial() const { return kind_ == Kind::kPartial; }
  // Shard or _StridedShard: the placement changes the local shape.
  bool is_shard_like() const { return kind_ == Kind::kShard || kind_ == Kind::kStridedShard; }
  int dim() const { return dim_; }                        // tensor dim of a shard-like placement
  int64_t split_factor() const { return split_factor_; }  // 1 unless kStridedShard
  ReduceOp reduce_op() const { return reduce_op_; }       // meaningful for kPartial

  // "S(0)", "R", "P(sum)", "_S(0, 2)".
  std::string ToString() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ && a.dim_ == b.dim_ && a.split_factor_ == b.split_factor_ &&
           a.reduce_op_ == b.reduce_op_;
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

 private:
  Placement(Kind kind, int dim, int64_t split_factor, ReduceOp op)
      : kind_(kind), dim_(dim), split_factor_(split_factor), reduce_op_(op) {}

  Kind kind_;
  int dim_;
  int64_t split_factor_;
  ReduceOp reduce_op_;
};

// Parses one placement: "S(0)", "Shard(dim=0)", "R", "Replicate()", "P(sum)",
// "Partial(avg)", "_S(0, 2)", "_StridedShard(dim=0, sf=2)". InvalidArgument otherwise,
// including a split factor outside [1, kMaxSplitFactor].
absl::StatusOr<Placement> ParsePlacement(absl::string_view text);
// "[S(0), R]".
std::string PlacementsToString(const std::vector<Placement>& placements);
// Parses "[S(0), R]" or "S(0),R" (brackets optional).
absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text);

}  // namespace sdrt

#endif  // SDRT_TENSOR_DTENSOR_PLACEMENT_H_
