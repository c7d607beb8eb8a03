// WeightMap::DestinationTensors (core/distributed/weight_map.h): the tensor list of a
// destination made by a map, from the source's alone, by the lowering's own arithmetic
// (internal/mapping/segments.h) without any layout.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/internal/mapping/segments.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/internal/fp8_scale.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;

constexpr int64_t kFp8Block = 128;  // the block edge of block scales (quantize.h)

absl::Status Invalid(int rule, const WeightMapRule& r, absl::string_view tensor,
                     absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(internal::RuleWhere(static_cast<size_t>(rule), r, tensor), ": ", what));
}

}  // namespace

absl::StatusOr<std::vector<SafetensorsTensorSpec>> WeightMap::DestinationTensors(
    const std::vector<SafetensorsTensorSpec>& sources, const PartsOf& parts) const {
  std::vector<SafetensorsTensorSpec> out;
  if (compiled_ == nullptr) return sources;
  // A fuse's destination: its slot in `out` and its components as they are found.
  struct Fused {
    size_t slot = 0;
    int rule = 0;
    std::vector<const SafetensorsTensorSpec*> components;
  };
  std::map<std::string, Fused> fused;
  // What made each name of `out`: a rule's index, or -1 for a source kept as it is.
  std::map<std::string, std::pair<int, std::string>> made_by;  // and from which source
  const auto once = [&](const std::string& name, int rule,
                        absl::string_view source) -> absl::Status {
    const auto [it, inserted] = made_by.emplace(name, std::make_pair(rule, std::string(source)));
    if (inserted) return absl::OkStatus();
    const auto by = [](int r, absl::string_view from) {
      return r < 0 ? std::string("a source of that name")
                   : absl::StrCat("rule ", r, " from '", from, "'");
    };
    return absl::InvalidArgumentError(
        absl::StrCat("weight map: '", name, "' would be made twice: by ",
                     by(it->second.first, it->second.second), " and by ", by(rule, source)));
  };
  for (const SafetensorsTensorSpec& s : sources) {
    const std::optional<internal::SourceMatch> m = internal::MatchSource(*compiled_, s.name);
    if (!m.has_value()) {
      SDRT_RETURN_IF_ERROR(once(s.name, -1, s.name));
      out.push_back(s);
      continue;
    }
    const WeightMapRule& r = compiled_->rule_list[m->rule];
    if (m->too_long) {
      return Invalid(m->rule, r, s.name,
                     absl::StrCat("makes a name of more than ",
                                  internal::kMaxDestinationNameBytes, " bytes"));
    }
    if (m->empty_name) return Invalid(m->rule, r, s.name, "makes an empty name");
    const std::string& d = m->destinations[0];
    if (r.kind == Kind::kSplit && r.sizes.empty()) {
      return Invalid(m->rule, r, s.name,
                     "a split's destination shapes are not known from its source alone (give "
                     "the rule its sizes, or the destination state dict to the library)");
    }
    if (r.kind != Kind::kRename && r.dim >= static_cast<int>(s.shape.size())) {
      return Invalid(m->rule, r, s.name,
                     absl::StrCat("dim ", r.dim, " of a tensor of ", s.shape.size(), " dims"));
    }
    if (r.kind == Kind::kSplit) {
      // The destinations, each the source's shape with dim its size.
      if (r.interleave == WeightMapRule::Interleave::kShards) {
        return Invalid(m->rule, r, s.name,
                       "a split from shards: a full source's parts are not known (give the "
                       "destination state dict to the library)");
      }
      SDRT_ASSIGN_OR_RETURN(
          const int64_t held,
          internal::FusedSize(r, r.sizes, 1,
                              internal::RuleWhere(static_cast<size_t>(m->rule), r, s.name)));
      if (held != s.shape[r.dim]) {
        return Invalid(m->rule, r, s.name,
                       absl::StrCat("its dim ", r.dim, " is ", s.shape[r.dim],
                                    "; its sizes make ", held));
      }
      for (size_t k = 0; k < m->destinations.size(); ++k) {
        SDRT_RETURN_IF_ERROR(once(m->destinations[k], m->rule, s.name));
        SafetensorsTensorSpec part{m->destinations[k], s.dtype, s.shape};
        part.shape[r.dim] = r.sizes[k];
        out.push_back(std::move(part));
      }
      continue;
    }
    if (r.kind == Kind::kFuse) {
      auto [it, inserted] = fused.try_emplace(d);
      if (inserted) {
        SDRT_RETURN_IF_ERROR(once(d, m->rule, s.name));
        it->second.slot = out.size();
        it->second.rule = m->rule;
        it->second.components.assign(r.from.size(), nullptr);
        out.push_back({d, s.dtype, s.shape});
      }
      it->second.components[static_cast<size_t>(m->component)] = &s;
      continue;
    }
    SDRT_RETURN_IF_ERROR(once(d, m->rule, s.name));
    SafetensorsTensorSpec spec{d, s.dtype, s.shape};
    if (r.kind == Kind::kRegroup) {
      const std::string where = internal::RuleWhere(static_cast<size_t>(m->rule), r, s.name);
      if (r.source_interleave == WeightMapRule::Interleave::kShards) {
        return Invalid(m->rule, r, s.name,
                       "a regroup from shards: the source's parts are not known from its tensors "
                       "alone (give the destination state dict to the library)");
      }
      SDRT_ASSIGN_OR_RETURN(const int64_t held,
                            internal::FusedSize(internal::SourceSideOf(r), r.sizes, 1, where));
      if (held != s.shape[r.dim]) {
        return Invalid(m->rule, r, s.name,
                       absl::StrCat("its dim ", r.dim, " is ", s.shape[r.dim], "; its sizes make ",
                                    held));
      }
      int64_t n = 1;
      if (r.interleave == WeightMapRule::Interleave::kShards) {
        SDRT_ASSIGN_OR_RETURN(n, parts(d, s.shape, r.dim));
      }
      SDRT_ASSIGN_OR_RETURN(spec.shape[r.dim], internal::FusedSize(r, r.sizes, n, where));
    }
    if (r.kind == Kind::kPad) {
      SDRT_ASSIGN_OR_RETURN(
          spec.shape[r.dim],
          internal::FusedSize(r, {s.shape[r.dim]}, 1,
                              internal::RuleWhere(static_cast<size_t>(m->rule), r, s.name)));
    }
    out.push_back(std::move(spec));
  }
  // FP8 components' block scales fused like their codes: placed after the fused codes, and
  // the components' own left out.
  std::map<std::string, const SafetensorsTensorSpec*> by_name;
  for (const SafetensorsTensorSpec& s : sources) by_name.emplace(s.name, &s);
  std::map<size_t, SafetensorsTensorSpec> scale_after;
  std::set<std::string> consumed;
  for (auto& [name, f] : fused) {
    const WeightMapRule& r = compiled_->rule_list[f.rule];
    std::vector<int64_t> rows;
    const SafetensorsTensorSpec* first = f.components[0];
    for (size_t k = 0; k < f.components.size(); ++k) {
      const SafetensorsTensorSpec* c = f.components[k];
      if (c == nullptr) {
        std::vector<absl::string_view> names;
        for (const SafetensorsTensorSpec& s : sources) names.push_back(s.name);
        return Invalid(f.rule, r, name,
                       absl::StrCat("no source matches its component ", k, " ('", r.from[k], "')",
                                    internal::ComponentTakenNote(*compiled_, f.rule, k, names)));
      }
      bool fits = c->shape.size() == first->shape.size() && c->dtype == first->dtype;
      for (size_t dim = 0; fits && dim < c->shape.size(); ++dim) {
        fits = static_cast<int>(dim) == r.dim || c->shape[dim] == first->shape[dim];
      }
      if (!fits) {
        return Invalid(f.rule, r, name,
                       absl::StrCat("component '", c->name, "' ", DTypeName(c->dtype),
                                    ShapeToString(c->shape), " does not fit '", first->name, "' ",
                                    DTypeName(first->dtype), ShapeToString(first->shape),
                                    " (components share a dtype and every dim but ", r.dim, ")"));
      }
      rows.push_back(c->shape[r.dim]);
    }
    int64_t n = 1;
    if (r.interleave == WeightMapRule::Interleave::kShards) {
      SDRT_ASSIGN_OR_RETURN(n, parts(name, first->shape, r.dim));
    }
    SDRT_ASSIGN_OR_RETURN(
        const int64_t size,
        internal::FusedSize(r, rows, n,
                            internal::RuleWhere(static_cast<size_t>(f.rule), r, name)));
    out[f.slot].shape = first->shape;
    out[f.slot].shape[r.dim] = size;
    // FP8 codes beside block scales: the scales are fused like them, in blocks.
    if (!internal::IsFp8Codes(first->dtype)) continue;
    std::vector<const SafetensorsTensorSpec*> scales;
    for (const SafetensorsTensorSpec* c : f.components) {
      const auto it = by_name.find(c->name + "_scale_inv");
      if (it != by_name.end()) scales.push_back(it->second);
    }
    if (scales.size() != f.components.size()) continue;  // codes alone
    // Only whole 128-row blocks fuse; else the codes go alone and the scales as they are.
    const std::string where = internal::RuleWhere(static_cast<size_t>(f.rule), r, name);
    std::vector<int64_t> block_rows;
    const absl::StatusOr<WeightMapRule> blocks =
        internal::InBlocks(r, kFp8Block, rows, block_rows, where);
    if (!blocks.ok()) continue;
    SafetensorsTensorSpec fused_scales{name + "_scale_inv", scales[0]->dtype, scales[0]->shape};
    SDRT_ASSIGN_OR_RETURN(fused_scales.shape[r.dim],
                          internal::FusedSize(*blocks, block_rows, n, where));
    scale_after[f.slot] = std::move(fused_scales);
    for (const SafetensorsTensorSpec* c : scales) consumed.insert(c->name);
  }
  if (scale_after.empty()) return out;
  std::vector<SafetensorsTensorSpec> with_scales;
  for (size_t i = 0; i < out.size(); ++i) {
    if (consumed.count(out[i].name)) continue;
    with_scales.push_back(std::move(out[i]));
    const auto it = scale_after.find(i);
    if (it != scale_after.end()) with_scales.push_back(std::move(it->second));
  }
  return with_scales;
}

}  // namespace sdrt
