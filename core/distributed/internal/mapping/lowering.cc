#include "sdrt/core/distributed/internal/mapping/lowering.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/internal/mapping/layout_pieces.h"
#include "sdrt/core/distributed/internal/mapping/lowering_steps.h"
#include "sdrt/core/distributed/internal/mapping/segments.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;

// A rule applied: its sources and destinations by name.
struct Unit {
  int rule = 0;
  std::vector<std::string> sources;       // a fuse's: one per component ("" until found)
  std::vector<std::string> destinations;  // a split's: one per component
  const WeightMapRule* derived = nullptr;  // FP8 scales: the rule in blocks, else map's own
};

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

}  // namespace

absl::StatusOr<MapLowering> LowerLeafLayouts(const WeightMap::Compiled& map,
                                            std::vector<std::vector<LeafLayout>>& per_rank,
                                            bool quantize_on_senders) {
  LoweringSides sides;
  std::vector<std::string> source_order;
  for (int rank = 0; rank < static_cast<int>(per_rank.size()); ++rank) {
    for (const LeafLayout& l : per_rank[rank]) {
      auto [it, inserted] = sides.try_emplace({l.path, l.source});
      if (inserted) {
        it->second.layout = &l;
        it->second.first_rank = rank;
        if (l.source) source_order.push_back(l.path);
      }
      if (l.kind == LeafLayout::Kind::kPlain) it->second.plain_holders.push_back(rank);
    }
  }
  MapLowering out;
  out.on_senders = quantize_on_senders;
  // FP8 destinations (quantize.h): every rank's first description of a destination leaf.
  std::vector<const LeafLayout*> destination_leaves;
  for (const auto& [key, side] : sides) {
    if (!key.second) destination_leaves.push_back(side.layout);
  }
  SDRT_ASSIGN_OR_RETURN(
      out.quantized,
      FindQuantizedDestinations(destination_leaves, [&](const std::string& path) {
        const auto it = sides.find({path, false});
        return it == sides.end() ? nullptr : it->second.layout;
      }));
  std::map<std::string, int> quantized_of;
  for (size_t i = 0; i < out.quantized.size(); ++i) {
    quantized_of.emplace(out.quantized[i].path, static_cast<int>(i));
  }
  std::map<std::string, std::string> quantized_source;  // a renamed FP8 leaf's source
  // FP8 sources dequantized into wider destinations (dequantize.h), by name.
  std::map<std::string, int> dequantized_of;
  const auto dequantize = [&](const std::string& name, DType into) -> absl::StatusOr<int> {
    const auto side = sides.find({name, true});
    if (side == sides.end()) return -1;
    SDRT_ASSIGN_OR_RETURN(
        const std::optional<DequantizedSource> found,
        FindDequantized(*side->second.layout, into, [&](const std::string& path) {
          const auto it = sides.find({path, true});
          return it == sides.end() ? nullptr : it->second.layout;
        }));
    if (!found.has_value()) return -1;
    const auto [it, made] =
        dequantized_of.emplace(name, static_cast<int>(out.dequantized.size()));
    if (made) out.dequantized.push_back(*found);
    return it->second;
  };
  // Which rule takes each source, and the units they make.
  std::vector<Unit> units;
  std::map<std::string, size_t> unit_of_destination;
  for (const std::string& name : source_order) {
    const std::optional<SourceMatch> m = MatchSource(map, name);
    if (!m.has_value()) continue;
    const WeightMapRule& rule = map.rule_list[m->rule];
    const std::string where = RuleWhere(static_cast<size_t>(m->rule), rule, name);
    if (m->too_long) {
      return Invalid(where, absl::StrCat("makes a name of more than ", kMaxDestinationNameBytes,
                                         " bytes"));
    }
    if (m->empty_name) return Invalid(where, "makes an empty name");
    if (rule.kind == Kind::kFuse) {
      const std::string& d = m->destinations[0];
      auto [it, inserted] = unit_of_destination.try_emplace(d, units.size());
      if (inserted) {
        units.push_back({m->rule, std::vector<std::string>(rule.from.size()), {d}});
      } else if (units[it->second].rule != m->rule) {
        return Invalid(where, absl::StrCat("'", d, "' is made by another rule too"));
      }
      std::string& slot = units[it->second].sources[static_cast<size_t>(m->component)];
      if (!slot.empty()) {
        return Invalid(where, absl::StrCat("'", slot, "' and '", name, "' are both component ",
                                           m->component, " of '", d, "'"));
      }
      slot = name;
      continue;
    }
    for (const std::string& d : m->destinations) {
      if (!unit_of_destination.try_emplace(d, units.size()).second) {
        return Invalid(where, absl::StrCat("'", d, "' is made by another rule too"));
      }
    }
    units.push_back({m->rule, {name}, m->destinations});
  }
  // Destination leaves replaced: the lowered leaves go where the first of a unit's
  // destinations was (its anchor), the others are dropped.
  AnchoredLeaves anchored;
  std::set<SideKey> removed;
  std::map<std::string, std::string> renames;  // destination path -> the source's name
  std::deque<WeightMapRule> derived_rules;  // FP8 scales' rules (units point at them)
  for (size_t u = 0; u < units.size(); ++u) {
    const Unit unit = units[u];  // copied: FP8 scales add units
    const WeightMapRule& rule = unit.derived != nullptr ? *unit.derived : map.rule_list[unit.rule];
    const bool split = rule.kind == Kind::kSplit;
    const std::string& fused_path = split ? unit.sources[0] : unit.destinations[0];
    const std::string where = RuleWhere(static_cast<size_t>(unit.rule), rule, fused_path);
    if (rule.kind == Kind::kRename) {
      const std::string& src = unit.sources[0];
      const std::string& d = unit.destinations[0];
      if (!sides.count({d, false}) || d == src) continue;
      if (sides.count({src, false})) {
        return Invalid(where, absl::StrCat("'", d, "' would go by the name '", src,
                                           "', which another destination leaf has"));
      }
      SDRT_ASSIGN_OR_RETURN(const int dq, dequantize(src, sides.at({d, false}).layout->dtype));
      const DType from = sides.at({src, true}).layout->dtype;
      const bool codes_source = IsFp8Codes(from);
      if ((quantized_of.count(d) && !codes_source) || dq >= 0) {
        quantized_source[d] = src;  // lowered below, as any FP8 leaf no rule fuses
        continue;
      }
      const LeafLayout& s = *sides.at({src, true}).layout;
      renames[d] = src;
      out.renamed.push_back({src, d, s.dtype, s.shape});
      continue;
    }
    // The destinations of the unit, and the side (and leaf) that holds the fused tensor.
    const std::vector<std::string>& dsts = unit.destinations;
    // No rank wants it: left out, as an unwanted source is (a split: none of its parts).
    if (!split && !sides.count({dsts[0], false})) continue;
    if (split && std::none_of(dsts.begin(), dsts.end(), [&](const std::string& d) {
          return sides.count({d, false}) > 0;
        })) {
      continue;
    }
    const std::vector<std::string>& names = split ? dsts : unit.sources;
    const SideInfo& fused = sides.at({fused_path, split});
    const IntVector& fused_shape = fused.layout->shape;
    if (rule.dim >= static_cast<int>(fused_shape.size())) {
      return Invalid(where, absl::StrCat("dim ", rule.dim, " of a tensor of ",
                                         fused_shape.size(), " dims"));
    }
    std::vector<int64_t> rows;
    std::vector<const SideInfo*> components;
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k].empty()) {
        std::vector<absl::string_view> source_names;
        for (const auto& [key, side] : sides) {
          if (key.second) source_names.push_back(key.first);
        }
        return Invalid(where, absl::StrCat("no source matches its component ", k, " ('",
                                           rule.from[k], "')",
                                           ComponentTakenNote(map, unit.rule, k, source_names)));
      }
      const auto c = sides.find({names[k], !split});
      if (c == sides.end()) {
        return Invalid(where, absl::StrCat("its destination '", names[k],
                                           "' is held by no rank, its other parts are"));
      }
      const IntVector& shape = c->second.layout->shape;
      bool fits = shape.size() == fused_shape.size();
      for (size_t d = 0; fits && d < shape.size(); ++d) {
        fits = d == static_cast<size_t>(rule.dim) || shape[d] == fused_shape[d];
      }
      if (!fits) {
        return Invalid(where, absl::StrCat("component '", names[k], "' ", ShapeToString(shape),
                                           " does not fit the fused ", ShapeToString(fused_shape),
                                           " off dim ", rule.dim));
      }
      if (split && k > 0 && c->second.layout->dtype != components[0]->layout->dtype) {
        return Invalid(where, absl::StrCat("its destinations '", names[0], "' and '", names[k],
                                           "' differ in dtype"));
      }
      components.push_back(&c->second);
      rows.push_back(shape[rule.dim]);
    }
    if (split && !rule.sizes.empty() && rows != rule.sizes) {
      return Invalid(where, "its destinations' sizes along the dim are not the rule's sizes");
    }
    // A regroup: the components are the rule's sizes, and where its source holds each.
    const bool regroup = rule.kind == Kind::kRegroup;
    std::vector<std::vector<FusedSegment>> held;
    if (regroup) {
      rows = rule.sizes;
      SDRT_ASSIGN_OR_RETURN(held, HeldComponents(rule, *components[0], where));
    }
    SDRT_ASSIGN_OR_RETURN(const std::vector<LayoutPiece> fused_pieces, PiecesOfLayout(*fused.layout, fused.plain_holders, where));
    // A tensor of no elements has no pieces to count parts by, nor anything to move.
    const bool no_elements =
        std::any_of(fused_shape.begin(), fused_shape.end(), [](int64_t n) { return n == 0; });
    int64_t parts = 1;
    if (!no_elements && rule.kind != Kind::kPad && rule.interleave == Interleave::kShards) {
      SDRT_ASSIGN_OR_RETURN(parts, EqualParts(fused_pieces, rule.dim, fused_shape[rule.dim], where));
    }
    SDRT_ASSIGN_OR_RETURN(const std::vector<FusedSegment> segments,
                          FusedSegments(rule, rows, fused_shape[rule.dim], parts, where));
    const int dim = rule.dim;
    // FP8 codes with their block scales into an FP8 destination: the codes move as they are,
    // the scales follow as a unit of their own, by the rule in blocks (fp8_lowering.cc).
    const auto quantized = quantized_of.find(dsts[0]);
    const bool codes_as_they_are = !split && quantized != quantized_of.end() &&
                                   IsFp8Codes(components[0]->layout->dtype);
    if (codes_as_they_are) {
      SDRT_ASSIGN_OR_RETURN(
          Fp8ScalesUnit scales,
          ScalesLikeTheirCodes(rule, out.quantized[static_cast<size_t>(quantized->second)],
                               names, components, *fused.layout, sides, where));
      derived_rules.push_back(std::move(scales.rule));
      units.push_back({unit.rule, std::move(scales.sources), {std::move(scales.destination)},
                       &derived_rules.back()});
    }
    std::vector<LoweredDestination> lowered;
    if (!split) {
      // A fuse or pad: one lowered leaf per component source, views into the fused leaf.
      for (size_t k = 0; k < names.size(); ++k) {
        if (names[k] != dsts[0] && sides.count({names[k], false})) {
          return Invalid(where, absl::StrCat("its source '", names[k],
                                             "' is also the name of a destination leaf"));
        }
        LoweredDestination& d = lowered.emplace_back();
        d.name = names[k];
        d.quantized = quantized == quantized_of.end() || codes_as_they_are ? -1 : quantized->second;
        d.source_dtype = components[k]->layout->dtype;
        d.dtype = d.quantized >= 0 && !quantize_on_senders ? d.source_dtype : fused.layout->dtype;
        if (d.quantized < 0) {
          SDRT_ASSIGN_OR_RETURN(d.dequantized, dequantize(names[k], fused.layout->dtype));
          if (d.dequantized >= 0) d.dtype = d.source_dtype;  // the codes move as they are
        }
        d.shape = components[k]->layout->shape;
        d.dim = dim;
        d.leaves = {dsts[0]};
        d.zero_rest = rule.kind == Kind::kPad;
      }
      for (const LayoutPiece& p : fused_pieces) {
        if (EmptyPiece(p)) continue;
        const int64_t a = p.offsets[dim], b = a + p.sizes[dim];
        // The segments lie in fused order: only those from the one holding `a` on.
        auto first = std::upper_bound(
            segments.begin(), segments.end(), a,
            [](int64_t x, const FusedSegment& s) { return x < s.fused + s.length; });
        for (auto it = first; it != segments.end() && it->fused < b; ++it) {
          const FusedSegment& s = *it;
          const int64_t lo = std::max(a, s.fused), hi = std::min(b, s.fused + s.length);
          if (lo >= hi) continue;
          if (!regroup) {
            LoweredDestination& d = lowered[static_cast<size_t>(s.component)];
            TransferBox box{p.offsets, p.sizes, p.rank};
            box.offsets[dim] = s.offset + (lo - s.fused);
            box.sizes[dim] = hi - lo;
            d.boxes.push_back(std::move(box));
            d.views.push_back({0, p.rank, p.local, lo - a, hi - lo});
            continue;
          }
          // A regroup: the component's elements where the source holds them.
          PlaceRegrouped(held[static_cast<size_t>(s.component)], s.offset + (lo - s.fused),
                         hi - lo, p, lo - a, lowered[0]);
        }
      }
    } else {
      // A split: one lowered leaf of the fused source, views into each component's leaf.
      if (sides.count({fused_path, false})) {
        return Invalid(where, "its name is also the name of a destination leaf");
      }
      SDRT_ASSIGN_OR_RETURN(const int split_quantized,
                            SplitRecipe(names, quantized_of, out.quantized, where));
      SDRT_ASSIGN_OR_RETURN(const int dq, dequantize(fused_path, components[0]->layout->dtype));
      if (dq >= 0) {
        return Invalid(where, "its source is FP8 with scales, which a split does not dequantize");
      }
      LoweredDestination& d = lowered.emplace_back();
      d.name = fused_path;
      d.dtype = components[0]->layout->dtype;
      d.quantized = split_quantized;
      d.source_dtype = fused.layout->dtype;
      // FP8 parts quantized after the move go through staging of the source's dtype.
      if (d.quantized >= 0 && !quantize_on_senders) d.dtype = d.source_dtype;
      d.shape = fused_shape;
      d.dim = dim;
      d.leaves = names;
      for (size_t k = 0; k < names.size(); ++k) {
        SDRT_ASSIGN_OR_RETURN(const std::vector<LayoutPiece> pieces, PiecesOfLayout(*components[k]->layout, components[k]->plain_holders, where));
        const std::vector<FusedSegment> own = FirstOfEach(segments, static_cast<int>(k));
        for (const LayoutPiece& p : pieces) {
          if (EmptyPiece(p)) continue;
          const int64_t a = p.offsets[dim], b = a + p.sizes[dim];
          // `own` lies in the component's order: only those from the one holding `a` on.
          auto first = std::upper_bound(
              own.begin(), own.end(), a,
              [](int64_t x, const FusedSegment& s) { return x < s.offset + s.length; });
          for (auto it = first; it != own.end() && it->offset < b; ++it) {
            const FusedSegment& s = *it;
            const int64_t lo = std::max(a, s.offset), hi = std::min(b, s.offset + s.length);
            if (lo >= hi) continue;
            TransferBox box{p.offsets, p.sizes, p.rank};
            box.offsets[dim] = s.fused + (lo - s.offset);
            box.sizes[dim] = hi - lo;
            d.boxes.push_back(std::move(box));
            d.views.push_back({static_cast<int>(k), p.rank, p.local, lo - a, hi - lo});
          }
        }
      }
    }
    for (LoweredDestination& d : lowered) {
      SDRT_RETURN_IF_ERROR(Emit(std::move(d), where, out, anchored[{dsts[0], false}]));
    }
    for (const std::string& d : dsts) removed.insert({d, false});
  }
  SDRT_RETURN_IF_ERROR(
      LowerPlainQuantized(sides, quantized_source, quantize_on_senders, out, anchored, removed));
  SDRT_RETURN_IF_ERROR(LowerDequantized(sides, quantized_source, dequantize, out, anchored,
                                        removed));
  if (out.empty()) return out;
  SDRT_RETURN_IF_ERROR(ReplaceLoweredLeaves(sides, anchored, removed, renames, per_rank));
  return out;
}

}  // namespace sdrt::internal
