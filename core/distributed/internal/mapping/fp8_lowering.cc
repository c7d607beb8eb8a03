// The weight map's lowering of FP8 leaves that no rule fuses or pads, and of the scales of
// FP8 sources a rule fuses as they are (lowering_steps.h).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/layout_pieces.h"
#include "sdrt/core/distributed/internal/mapping/lowering_steps.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

}  // namespace

absl::StatusOr<int> SplitRecipe(const std::vector<std::string>& names,
                                const std::map<std::string, int>& quantized_of,
                                const std::vector<QuantizedDestination>& quantized,
                                const std::string& where) {
  int first = -1;
  for (size_t k = 0; k < names.size(); ++k) {
    const auto it = quantized_of.find(names[k]);
    const int q = it == quantized_of.end() ? -1 : it->second;
    if (k == 0) {
      first = q;
      continue;
    }
    const bool alike =
        (q < 0) == (first < 0) &&
        (q < 0 || (quantized[static_cast<size_t>(q)].codes ==
                       quantized[static_cast<size_t>(first)].codes &&
                   quantized[static_cast<size_t>(q)].scale ==
                       quantized[static_cast<size_t>(first)].scale &&
                   quantized[static_cast<size_t>(q)].tile ==
                       quantized[static_cast<size_t>(first)].tile));
    if (!alike) {
      return Invalid(where, absl::StrCat("its destinations '", names[0], "' and '", names[k],
                                         "' are not FP8 alike (codes, scales and blocks)"));
    }
  }
  if (first >= 0 && quantized[static_cast<size_t>(first)].tile == 0) {
    return Invalid(where, absl::StrCat(
        "'", names[0], "' has one scale ('", quantized[static_cast<size_t>(first)].scale_path,
        "'): the parts of a split are quantized by blocks of their source, so give them block "
        "scales ('_scale_inv')"));
  }
  return first;
}

absl::StatusOr<Fp8ScalesUnit> ScalesLikeTheirCodes(const WeightMapRule& rule,
                                                   const QuantizedDestination& q,
                                                   const std::vector<std::string>& names,
                                                   const std::vector<const SideInfo*>& components,
                                                   const LeafLayout& fused,
                                                   const LoweringSides& sides,
                                                   const std::string& where) {
  const int64_t tile = q.tile;
  if (tile == 0) {
    return Invalid(where, absl::StrCat("'", q.path, "' has one scale ('", q.scale_path,
                                       "'), and its FP8 sources each their own: give it block "
                                       "scales ('_scale_inv'), which fuse with the codes"));
  }
  if (rule.kind == WeightMapRule::Kind::kPad) {
    return Invalid(where, "a pad of FP8 codes is not built");
  }
  Fp8ScalesUnit out;
  out.rule = rule;
  out.destination = q.scale_path;
  const auto find = [&](const std::string& path) -> const LeafLayout* {
    const auto it = sides.find({path, true});
    return it == sides.end() ? nullptr : it->second.layout;
  };
  for (size_t k = 0; k < names.size(); ++k) {
    const LeafLayout& c = *components[k]->layout;
    if (c.dtype != fused.dtype) {
      return Invalid(where, absl::StrCat("its source '", names[k], "' is ", DTypeName(c.dtype),
                                         " and '", q.path, "' ", DTypeName(fused.dtype),
                                         " (FP8 sources fuse as they are, into their own dtype)"));
    }
    SDRT_ASSIGN_OR_RETURN(const Fp8Scales scales, FindFp8Scales(names[k], find));
    if (scales.layout == nullptr || scales.tile != tile) {
      return Invalid(where, absl::StrCat("its FP8 source '", names[k], "' has no '", names[k],
                                         "_scale_inv' of 128 x 128 block scales beside it"));
    }
    if (c.shape.size() <= static_cast<size_t>(rule.dim)) {
      return Invalid(where, absl::StrCat("its FP8 source '", names[k], "' ",
                                         ShapeToString(c.shape), " has no dim ", rule.dim));
    }
    out.sources.push_back(scales.name);
  }
  std::vector<int64_t> rows, block_rows;
  for (const SideInfo* c : components) {
    rows.push_back(c->layout->shape[static_cast<size_t>(rule.dim)]);
  }
  SDRT_ASSIGN_OR_RETURN(out.rule, InBlocks(rule, tile, rows, block_rows, where));
  return out;
}

absl::Status LowerPlainQuantized(const LoweringSides& sides,
                                 const std::map<std::string, std::string>& renamed_sources,
                                 bool quantize_on_senders, MapLowering& out,
                                 AnchoredLeaves& anchored, std::set<SideKey>& removed) {
  for (size_t i = 0; i < out.quantized.size(); ++i) {
    const QuantizedDestination& q = out.quantized[i];
    if (removed.count({q.path, false})) {  // a rule lowered it
      removed.insert({q.scale_path, false});
      continue;
    }
    const auto renamed = renamed_sources.find(q.path);
    const std::string& name = renamed == renamed_sources.end() ? q.path : renamed->second;
    const std::string where = absl::StrCat("FP8: '", q.path, "'");
    const auto source = sides.find({name, true});
    const SideInfo& destination = sides.at({q.path, false});
    if (source == sides.end()) {
      return Invalid(where, absl::StrCat("no rank holds its source '", name, "'"));
    }
    const DType from = source->second.layout->dtype;
    if (IsFp8Codes(from)) {
      continue;  // codes already: they and their scales move as they are
    }
    removed.insert({q.scale_path, false});
    if (source->second.layout->shape != destination.layout->shape ||
        destination.layout->shape.empty()) {
      return Invalid(where, absl::StrCat("of ", ShapeToString(destination.layout->shape),
                                         " from '", name, "' of ",
                                         ShapeToString(source->second.layout->shape),
                                         " (a quantized tensor keeps its shape and has a dim)"));
    }
    SDRT_ASSIGN_OR_RETURN(
        const std::vector<LayoutPiece> pieces,
        PiecesOfLayout(*destination.layout, destination.plain_holders, where));
    LoweredDestination d;
    d.name = name;
    d.source_dtype = source->second.layout->dtype;
    d.dtype = quantize_on_senders ? q.codes : d.source_dtype;
    d.shape = destination.layout->shape;
    d.leaves = {q.path};
    d.quantized = static_cast<int>(i);
    for (const LayoutPiece& p : pieces) {
      if (EmptyPiece(p)) continue;
      d.boxes.push_back({p.offsets, p.sizes, p.rank});
      d.views.push_back({0, p.rank, p.local, 0, p.sizes[0]});
    }
    SDRT_RETURN_IF_ERROR(Emit(std::move(d), where, out, anchored[{q.path, false}]));
    removed.insert({q.path, false});
  }
  return absl::OkStatus();
}

absl::Status LowerDequantized(const LoweringSides& sides,
                              const std::map<std::string, std::string>& renamed_sources,
                              const DequantizeOf& dequantize, MapLowering& out,
                              AnchoredLeaves& anchored, std::set<SideKey>& removed) {
  for (const auto& [key, side] : sides) {
    if (key.second || removed.count(key)) continue;
    const std::string& path = key.first;
    const auto renamed = renamed_sources.find(path);
    const std::string& name = renamed == renamed_sources.end() ? path : renamed->second;
    SDRT_ASSIGN_OR_RETURN(const int dq, dequantize(name, side.layout->dtype));
    if (dq < 0) continue;
    const std::string where = absl::StrCat("FP8: '", path, "' from '", name, "'");
    const LeafLayout& source = *sides.at({name, true}).layout;
    if (source.shape != side.layout->shape || source.shape.empty()) {
      return Invalid(where, absl::StrCat("of ", ShapeToString(side.layout->shape), " from ",
                                         ShapeToString(source.shape),
                                         " (a dequantized tensor keeps its shape and has a dim)"));
    }
    SDRT_ASSIGN_OR_RETURN(const std::vector<LayoutPiece> pieces,
                          PiecesOfLayout(*side.layout, side.plain_holders, where));
    LoweredDestination d;
    d.name = name;
    d.dtype = d.source_dtype = source.dtype;
    d.shape = source.shape;
    d.leaves = {path};
    d.dequantized = dq;
    for (const LayoutPiece& p : pieces) {
      if (EmptyPiece(p)) continue;
      d.boxes.push_back({p.offsets, p.sizes, p.rank});
      d.views.push_back({0, p.rank, p.local, 0, p.sizes[0]});
    }
    SDRT_RETURN_IF_ERROR(Emit(std::move(d), where, out, anchored[key]));
    removed.insert(key);
  }
  for (size_t i = 0; i < out.dequantized.size(); ++i) {
    std::set<int64_t> ranks;
    std::string anchor;
    for (const LoweredDestination& d : out.destinations) {
      if (d.dequantized != static_cast<int>(i)) continue;
      for (const TransferBox& b : d.boxes) ranks.insert(b.rank);
      if (anchor.empty()) anchor = d.leaves[0];
    }
    if (ranks.empty()) continue;
    const DequantizedSource& src = out.dequantized[i];
    const std::string where = absl::StrCat("FP8: '", src.name, "' with '", src.scale_name, "'");
    if (sides.count({src.scale_name, false})) {
      return Invalid(where, "its scales are a source to dequantize with and a destination leaf");
    }
    LoweredDestination d;
    d.name = src.scale_name;
    d.dtype = d.source_dtype = src.scale;
    d.shape = src.scale_shape;
    d.scale_of = static_cast<int>(i);
    for (int64_t rank : ranks) {
      d.boxes.push_back({IntVector(d.shape.size(), 0), d.shape, rank});
      d.views.push_back({0, rank, 0, 0, 0});
    }
    SDRT_RETURN_IF_ERROR(Emit(std::move(d), where, out, anchored[{anchor, false}]));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
