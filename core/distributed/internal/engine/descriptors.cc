#include "sdrt/core/distributed/internal/engine/descriptors.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/inline_value.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr uint64_t kMaxKind = static_cast<uint64_t>(LeafLayout::Kind::kInline);
constexpr uint64_t kMaxPlacementKind = static_cast<uint64_t>(Placement::Kind::kStridedShard);
constexpr uint64_t kMaxReduceOp = static_cast<uint64_t>(ReduceOp::kProduct);

void PutInts(std::string* out, absl::Span<const int64_t> values) {
  PutU64(out, values.size());
  for (int64_t v : values) PutU64(out, static_cast<uint64_t>(v));
}

// Reads a count of at most `max` int64 values (each needs 8 bytes of what is left).
template <typename Vector>
bool Ints(ByteReader& r, uint64_t max, Vector* values) {
  uint64_t n = 0;
  if (!r.Bounded(max, &n) || n > r.Remaining() / sizeof(uint64_t)) return false;
  values->resize(static_cast<size_t>(n));
  for (auto& v : *values) {
    uint64_t u = 0;
    if (!r.U64(&u)) return false;
    v = static_cast<int64_t>(u);
  }
  return true;
}

bool DecodeLeaf(ByteReader& r, LeafLayout& leaf) {
  uint64_t side = 0, dtype = 0, kind = 0;
  if (!r.String(&leaf.path) || !r.Bounded(1, &side) ||
      !r.Bounded(static_cast<uint64_t>(kNumDTypes) - 1, &dtype) ||
      !Ints(r, kMaxTransferDims, &leaf.shape) || !r.Bounded(kMaxKind, &kind)) {
    return false;
  }
  leaf.source = side == 1;
  leaf.dtype = static_cast<DType>(dtype);
  leaf.kind = static_cast<LeafLayout::Kind>(kind);
  if (leaf.kind == LeafLayout::Kind::kMesh) {
    uint64_t count = 0;
    if (!Ints(r, kMaxTransferDims, &leaf.mesh_shape) ||
        !Ints(r, static_cast<uint64_t>(kMaxMeshRanks), &leaf.mesh_ranks) ||
        !r.String(&leaf.mesh_device) || !r.Bounded(kMaxTransferDims, &count)) {
      return false;
    }
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t k = 0, dim = 0, split = 0, op = 0;
      if (!r.Bounded(kMaxPlacementKind, &k) || !r.Bounded(kMaxTransferDims, &dim) ||
          !r.Bounded(static_cast<uint64_t>(kMaxSplitFactor), &split) ||
          !r.Bounded(kMaxReduceOp, &op)) {
        return false;
      }
      switch (static_cast<Placement::Kind>(k)) {
        case Placement::Kind::kReplicate:
          leaf.placements.push_back(Placement::Replicate());
          break;
        case Placement::Kind::kShard:
          leaf.placements.push_back(Placement::Shard(static_cast<int>(dim)));
          break;
        case Placement::Kind::kPartial:
          leaf.placements.push_back(Placement::Partial(static_cast<ReduceOp>(op)));
          break;
        case Placement::Kind::kStridedShard:
          leaf.placements.push_back(
              Placement::StridedShard(static_cast<int>(dim), static_cast<int64_t>(split)));
          break;
      }
    }
  } else if (leaf.kind == LeafLayout::Kind::kInline) {
    absl::string_view cbor;
    if (!r.View(&cbor)) return false;
    absl::StatusOr<Value> value = DecodeInlineValue(cbor);
    if (!value.ok()) return false;
    leaf.value = std::make_shared<const Value>(*std::move(value));
    leaf.inline_value = std::string(cbor);  // what it encodes to again
  } else if (leaf.kind == LeafLayout::Kind::kBoxes) {
    uint64_t count = 0;
    // Each box takes at least three words.
    if (!r.Bounded(static_cast<uint64_t>(kMaxTransferBoxes), &count) ||
        count > r.Remaining() / (3 * sizeof(uint64_t))) {
      return false;
    }
    leaf.boxes.resize(static_cast<size_t>(count));
    for (TransferBox& box : leaf.boxes) {
      uint64_t rank = 0;
      if (!Ints(r, kMaxTransferDims, &box.offsets) || !Ints(r, kMaxTransferDims, &box.sizes) ||
          !r.Bounded(static_cast<uint64_t>(kMaxMeshRanks), &rank)) {
        return false;
      }
      box.rank = static_cast<int64_t>(rank);
    }
  }
  return true;
}

bool SameLayout(const LeafLayout& a, const LeafLayout& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.kind == b.kind &&
         a.mesh_shape == b.mesh_shape && a.mesh_ranks == b.mesh_ranks &&
         a.mesh_device == b.mesh_device && a.placements == b.placements &&
         std::equal(a.boxes.begin(), a.boxes.end(), b.boxes.begin(), b.boxes.end(),
                    [](const TransferBox& x, const TransferBox& y) {
                      return x.offsets == y.offsets && x.sizes == y.sizes && x.rank == y.rank;
                    });
}

// Plain tensors held whole: on the source side the same dtype and shape; on the
// destination side any (the leaf is replaced by the full tensor).
bool SamePlain(const LeafLayout& a, const LeafLayout& b) {
  if (a.kind != LeafLayout::Kind::kPlain || b.kind != LeafLayout::Kind::kPlain) return false;
  return !a.source || (a.dtype == b.dtype && a.shape == b.shape);
}

// A leaf's description for an error message: dtype, global shape and layout (a mesh's first
// 8 ranks, a ShardedTensor's box count).
std::string LayoutText(const LeafLayout& l) {
  std::string out = absl::StrCat(DTypeName(l.dtype), ShapeToString(l.shape));
  switch (l.kind) {
    case LeafLayout::Kind::kMesh: {
      const size_t shown = std::min<size_t>(l.mesh_ranks.size(), 8);
      absl::StrAppend(&out, " on mesh ", ShapeToString(l.mesh_shape), " of ranks [",
                      absl::StrJoin(l.mesh_ranks.begin(), l.mesh_ranks.begin() + shown, ", "),
                      shown < l.mesh_ranks.size() ? ", ...]" : "]", " ", l.mesh_device, " ",
                      PlacementsToString(l.placements));
      break;
    }
    case LeafLayout::Kind::kBoxes:
      absl::StrAppend(&out, " as a ShardedTensor of ", l.boxes.size(), " boxes");
      break;
    default:
      absl::StrAppend(&out, " as a plain tensor");
  }
  return out;
}

}  // namespace

bool SameDescription(const LeafLayout& a, const LeafLayout& b) {
  return SameLayout(a, b) || (a.kind == LeafLayout::Kind::kPlain &&
                              b.kind == LeafLayout::Kind::kPlain && a.dtype == b.dtype &&
                              a.shape == b.shape);
}

namespace {

// One side of one leaf, as the ranks described it.
struct Side {
  const LeafLayout* layout = nullptr;  // the first rank's description
  int first_rank = -1;
  std::vector<int64_t> plain_holders;  // kPlain: every rank holding it whole
};

absl::StatusOr<TransferLayout> ToLayout(const Side& side, const std::string& path) {
  TransferLayout layout;
  const LeafLayout& l = *side.layout;
  switch (l.kind) {
    case LeafLayout::Kind::kMesh: {
      absl::StatusOr<DeviceMesh> mesh =
          DeviceMesh::Create(l.mesh_shape, l.mesh_ranks, {}, l.mesh_device);
      if (!mesh.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshard of '", path, "': ", mesh.status().message()));
      }
      layout.mesh = std::make_shared<const DeviceMesh>(*std::move(mesh));
      layout.placements = l.placements;
      break;
    }
    case LeafLayout::Kind::kBoxes:
      layout.boxes = l.boxes;
      break;
    case LeafLayout::Kind::kInline:  // refused by MergeLeafLayouts
    case LeafLayout::Kind::kPlain: {
      const int64_t holders = static_cast<int64_t>(side.plain_holders.size());
      SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({holders}, side.plain_holders));
      layout.mesh = std::make_shared<const DeviceMesh>(std::move(mesh));
      layout.placements = {Placement::Replicate()};
      break;
    }
  }
  return layout;
}

}  // namespace

void AppendLeafLayout(const LeafLayout& l, std::string* out) {
  PutString(out, l.path);
  PutU64(out, l.source ? 1 : 0);
  PutU64(out, static_cast<uint64_t>(l.dtype));
  PutInts(out, l.shape);
  PutU64(out, static_cast<uint64_t>(l.kind));
  if (l.kind == LeafLayout::Kind::kMesh) {
    PutInts(out, l.mesh_shape);
    PutInts(out, l.mesh_ranks);
    PutString(out, l.mesh_device);
    PutU64(out, l.placements.size());
    for (const Placement& p : l.placements) {
      PutU64(out, static_cast<uint64_t>(p.kind()));
      PutU64(out, static_cast<uint64_t>(p.is_shard_like() ? p.dim() : 0));
      PutU64(out, static_cast<uint64_t>(p.split_factor()));
      PutU64(out, static_cast<uint64_t>(p.reduce_op()));
    }
  } else if (l.kind == LeafLayout::Kind::kInline) {
    PutString(out, l.inline_value);
  } else if (l.kind == LeafLayout::Kind::kBoxes) {
    PutU64(out, l.boxes.size());
    for (const TransferBox& b : l.boxes) {
      PutInts(out, b.offsets);
      PutInts(out, b.sizes);
      PutU64(out, static_cast<uint64_t>(b.rank));
    }
  }
}

namespace {

// What this rank holds of `value` at `path` on one side; false for a leaf that is not a
// tensor (nothing to move).
bool DescribeLeaf(absl::string_view path, const Value& value, bool source, LeafLayout& out) {
  out.path = std::string(path);
  out.source = source;
  switch (value.kind()) {
    case ValueKind::kDTensor: {
      const DTensor& d = value.as_dtensor();
      out.kind = LeafLayout::Kind::kMesh;
      out.dtype = d.dtype();
      out.shape = d.global_shape();
      out.mesh_shape = d.mesh()->shape();
      out.mesh_ranks = d.mesh()->ranks();
      out.mesh_device = d.mesh()->device_type();
      out.placements = d.placements();
      return true;
    }
    case ValueKind::kShardedTensor: {
      const ShardedTensor& s = value.as_sharded();
      out.kind = LeafLayout::Kind::kBoxes;
      out.dtype = s.dtype();
      out.shape = s.global_shape();
      for (const ShardMetadata& m : s.shards_metadata()) {
        out.boxes.push_back({m.offsets, m.sizes, m.placement.rank});
      }
      return true;
    }
    case ValueKind::kTensor:
      out.kind = LeafLayout::Kind::kPlain;
      out.dtype = value.as_tensor().dtype();
      out.shape = value.as_tensor().shape();
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status DescribeStateDict(const Map& tree, bool source, std::vector<LeafLayout>& out) {
  SDRT_ASSIGN_OR_RETURN(const Leaves leaves, CollectLeaves(tree));
  for (const Leaf& leaf : leaves) {
    LeafLayout layout;
    if (!DescribeLeaf(leaf.path, *leaf.value, source, layout)) continue;
    SDRT_RETURN_IF_ERROR(CheckLeafDims(layout));
    out.push_back(std::move(layout));
  }
  return absl::OkStatus();
}

absl::Status CheckLeafDims(const LeafLayout& leaf) {
  const size_t dims = std::max(leaf.shape.size(), leaf.mesh_shape.size());
  if (dims <= static_cast<size_t>(kMaxTransferDims)) return absl::OkStatus();
  const bool mesh = leaf.mesh_shape.size() >= leaf.shape.size();
  return absl::InvalidArgumentError(absl::StrCat("'", leaf.path, "': ", mesh ? "a mesh of " : "",
                                                 dims, " dims; at most ", kMaxTransferDims,
                                                 " move between ranks"));
}

std::string EncodeLeafLayouts(const std::vector<LeafLayout>& leaves) {
  std::string out;
  PutU64(&out, leaves.size());
  for (const LeafLayout& l : leaves) AppendLeafLayout(l, &out);
  return out;
}

absl::StatusOr<std::vector<LeafLayout>> DecodeLeafLayouts(absl::string_view bytes, int from) {
  ByteReader r(bytes);
  uint64_t count = 0;
  // A leaf takes at least five words: its path's length, source, dtype, its shape's length
  // and kind (a 0-dim plain tensor with an empty path).
  bool ok = r.U64(&count) && count <= r.Remaining() / (5 * sizeof(uint64_t));
  std::vector<LeafLayout> leaves;
  // Each leaf made where it is decoded, while in cache (resizing first would write 10,000
  // default leaves, 3 MB, only to write them again).
  if (ok) leaves.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; ok && i < count; ++i) ok = DecodeLeaf(r, leaves.emplace_back());
  if (!ok || !r.AtEnd()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", from, " sent a malformed description of its leaves"));
  }
  return leaves;
}

absl::StatusOr<std::vector<TransferTensor>> MergeLeafLayouts(
    const std::vector<std::vector<LeafLayout>>& per_rank, std::vector<std::string>* skipped) {
  std::vector<std::string> order;  // paths in order of first mention
  std::map<std::pair<std::string, bool>, Side> sides;
  for (int rank = 0; rank < static_cast<int>(per_rank.size()); ++rank) {
    for (const LeafLayout& l : per_rank[rank]) {
      if (l.kind == LeafLayout::Kind::kInline) {
        return absl::InvalidArgumentError(absl::StrCat("reshard: rank ", rank, " describes '",
                                                       l.path, "' as a value, not a tensor"));
      }
      auto [it, inserted] = sides.try_emplace({l.path, l.source});
      Side& side = it->second;
      if (inserted) {
        side.layout = &l;
        side.first_rank = rank;
        if (!sides.count({l.path, !l.source})) order.push_back(l.path);
      } else if (!SameLayout(*side.layout, l) && !SamePlain(*side.layout, l)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reshard: ranks ", side.first_rank, " and ", rank, " describe the ",
            l.source ? "source" : "destination", " of '", l.path, "' differently: ",
            LayoutText(*side.layout), " against ", LayoutText(l)));
      }
      if (l.kind == LeafLayout::Kind::kPlain) side.plain_holders.push_back(rank);
    }
  }
  std::vector<TransferTensor> tensors;
  for (const std::string& path : order) {
    const auto dst = sides.find({path, false});
    const auto src = sides.find({path, true});
    if (dst == sides.end()) {
      if (skipped != nullptr) skipped->push_back(path);
      continue;
    }
    if (src == sides.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("reshard: no rank holds a source of '", path, "'"));
    }
    const LeafLayout& d = *dst->second.layout;
    const LeafLayout& s = *src->second.layout;
    for (const Placement& p : d.placements) {
      if (p.is_partial()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "reshard of '", path, "': a destination cannot be Partial (", p.ToString(), ")"));
      }
    }
    // A destination of another float dtype is a cast (PlanTransfer converts); any other
    // difference is an error.
    const bool cast = d.dtype != s.dtype && CastKindOf(d.dtype) == CastKind::kFloat &&
                      CastKindOf(s.dtype) == CastKind::kFloat;
    if (d.kind != LeafLayout::Kind::kPlain &&
        ((d.dtype != s.dtype && !cast) || d.shape != s.shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard of '", path, "': the source is ", DTypeName(s.dtype), ShapeToString(s.shape),
          " but the destination ", DTypeName(d.dtype), ShapeToString(d.shape)));
    }
    TransferTensor t;
    t.name = path;
    t.dtype = s.dtype;
    t.shape = s.shape;
    if (cast && d.kind != LeafLayout::Kind::kPlain) t.destination_dtype = d.dtype;
    SDRT_ASSIGN_OR_RETURN(t.source, ToLayout(src->second, path));
    SDRT_ASSIGN_OR_RETURN(t.destination, ToLayout(dst->second, path));
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace sdrt::internal
