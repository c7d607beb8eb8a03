// WeightMap::DestinationTensors (core/distributed/weight_map.h): the tensor list of a
// destination made by a map, from the source's alone, the arithmetic of the lowering's
// segments (internal/mapping/lowering.cc) without any layout.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {
namespace {

using Kind = WeightMapRule::Kind;

absl::Status Invalid(int rule, const WeightMapRule& r, absl::string_view tensor,
                     absl::string_view what) {
  static const char* const kKinds[] = {"rename", "fuse", "split", "pad"};
  return absl::InvalidArgumentError(absl::StrCat("weight map rule ", rule, " (",
                                                 kKinds[static_cast<int>(r.kind)], ") for '",
                                                 tensor, "': ", what));
}

// The fused dim of a fuse of `rows` (its components' sizes along the dim) cut into `parts`.
absl::StatusOr<int64_t> FusedSize(int rule, const WeightMapRule& r, absl::string_view name,
                                  const std::vector<int64_t>& rows, int64_t parts) {
  int64_t total = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t heads = r.head_size > 0 ? rows[k] / r.head_size : 0;
    if (r.head_size > 0 && rows[k] % r.head_size != 0) {
      return Invalid(rule, r, name, absl::StrCat("component ", k, " has ", rows[k],
                                                 " rows, not a multiple of the head size ",
                                                 r.head_size));
    }
    int64_t per_part = 0;
    if (r.interleave == WeightMapRule::Interleave::kGroups) {
      per_part = rows[k];  // the groups tile the components: the sum whatever the groups
    } else if (r.head_size > 0 && heads > 0 && heads < parts && parts % heads == 0) {
      per_part = r.head_size * parts;  // one head per part, replicated
    } else if (rows[k] % parts == 0 && (r.head_size == 0 || heads % parts == 0)) {
      per_part = rows[k];
    } else {
      return Invalid(rule, r, name, absl::StrCat("component ", k, " (", rows[k],
                                                 " rows) cannot be cut into ", parts, " parts"));
    }
    total += per_part;
  }
  return total;
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
  for (const SafetensorsTensorSpec& s : sources) {
    const std::optional<internal::SourceMatch> m = internal::MatchSource(*compiled_, s.name);
    if (!m.has_value()) {
      out.push_back(s);
      continue;
    }
    const WeightMapRule& r = compiled_->rule_list[m->rule];
    const std::string& d = m->destinations[0];
    if (r.kind == Kind::kSplit) {
      return Invalid(m->rule, r, s.name,
                     "a split's destination shapes are not known from its source alone (give "
                     "the destination state dict to the library)");
    }
    if (r.kind != Kind::kRename && r.dim >= static_cast<int>(s.shape.size())) {
      return Invalid(m->rule, r, s.name,
                     absl::StrCat("dim ", r.dim, " of a tensor of ", s.shape.size(), " dims"));
    }
    if (r.kind == Kind::kFuse) {
      auto [it, inserted] = fused.try_emplace(d);
      if (inserted) {
        it->second.slot = out.size();
        it->second.rule = m->rule;
        it->second.components.assign(r.from.size(), nullptr);
        out.push_back({d, s.dtype, s.shape});
      }
      it->second.components[static_cast<size_t>(m->component)] = &s;
      continue;
    }
    SafetensorsTensorSpec spec{d, s.dtype, s.shape};
    if (r.kind == Kind::kPad) {
      const int64_t n = s.shape[r.dim];
      spec.shape[r.dim] = (n + r.multiple - 1) / r.multiple * r.multiple;
    }
    out.push_back(std::move(spec));
  }
  for (auto& [name, f] : fused) {
    const WeightMapRule& r = compiled_->rule_list[f.rule];
    std::vector<int64_t> rows;
    const SafetensorsTensorSpec* first = f.components[0];
    for (size_t k = 0; k < f.components.size(); ++k) {
      const SafetensorsTensorSpec* c = f.components[k];
      if (c == nullptr) {
        return Invalid(f.rule, r, name, absl::StrCat("no source matches its component ", k,
                                                     " ('", r.from[k], "')"));
      }
      bool fits = first != nullptr && c->shape.size() == first->shape.size() &&
                  c->dtype == first->dtype;
      for (size_t dim = 0; fits && dim < c->shape.size(); ++dim) {
        fits = static_cast<int>(dim) == r.dim || c->shape[dim] == first->shape[dim];
      }
      if (!fits) {
        return Invalid(f.rule, r, name,
                       absl::StrCat("component '", c->name, "' ", ShapeToString(c->shape),
                                    " does not fit '", first == nullptr ? "" : first->name, "'"));
      }
      rows.push_back(c->shape[r.dim]);
    }
    int64_t n = 1;
    if (r.interleave == WeightMapRule::Interleave::kShards) {
      SDRT_ASSIGN_OR_RETURN(n, parts(name, first->shape, r.dim));
      if (n < 1) return Invalid(f.rule, r, name, absl::StrCat(n, " parts"));
    }
    SDRT_ASSIGN_OR_RETURN(const int64_t size, FusedSize(f.rule, r, name, rows, n));
    out[f.slot].shape = first->shape;
    out[f.slot].shape[r.dim] = size;
  }
  return out;
}

}  // namespace sdrt
