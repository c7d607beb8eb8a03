#include "sdrt/core/distributed/internal/mapping/segments.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

using Kind = WeightMapRule::Kind;
using Interleave = WeightMapRule::Interleave;

// The most segments one fused tensor is described by (parts or groups times components).
constexpr int64_t kMaxSegments = int64_t{1} << 20;

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// How one component is cut: the elements each part or group holds, and over how many
// parts one of its heads is replicated (kShards with fewer heads than parts).
struct Cut {
  int64_t per_piece = 0;
  int64_t replicas = 1;
};

// The cut of every component, and the group count (kGroups) or `parts` (kShards).
absl::StatusOr<std::vector<Cut>> Cuts(const WeightMapRule& rule, const std::vector<int64_t>& rows,
                                      int64_t& pieces, const std::string& where) {
  const int k_count = static_cast<int>(rows.size());
  const int64_t head = rule.head_size;
  for (int k = 0; head > 0 && k < k_count; ++k) {
    if (rows[k] % head != 0) {
      return Invalid(where, absl::StrCat("component ", k, " has ", rows[k],
                                         " rows, not a multiple of the head size ", head));
    }
  }
  if (rule.interleave == Interleave::kGroups) {
    pieces = rule.groups;
    if (pieces == 0) {
      if (head == 0 || k_count < 2) {
        return Invalid(where, "groups from the heads (groups 0) needs a head size");
      }
      pieces = rows[1] / head;
    }
  }
  if (pieces < 1 || pieces > kMaxSegments / k_count) {
    return Invalid(where, absl::StrCat(pieces, rule.interleave == Interleave::kGroups
                                                   ? " groups"
                                                   : " parts",
                                       "; from 1 to ", kMaxSegments / k_count));
  }
  std::vector<Cut> cuts(k_count);
  for (int k = 0; k < k_count; ++k) {
    const int64_t heads = head > 0 ? rows[k] / head : 0;
    if (rule.interleave == Interleave::kGroups) {
      if (rows[k] % pieces != 0) {
        return Invalid(where, absl::StrCat("component ", k, " (", rows[k],
                                           " rows) cannot be cut into ", pieces, " groups"));
      }
      cuts[k].per_piece = rows[k] / pieces;
    } else if (head > 0 && heads > 0 && heads < pieces && pieces % heads == 0) {
      cuts[k] = {head, pieces / heads};
    } else if (rows[k] % pieces == 0 && (head == 0 || heads % pieces == 0)) {
      cuts[k].per_piece = rows[k] / pieces;
    } else {
      return Invalid(where, absl::StrCat("component ", k, " (", rows[k], " rows",
                                         head > 0 ? absl::StrCat(", ", heads, " heads") : "",
                                         ") cannot be cut into ", pieces, " parts"));
    }
  }
  return cuts;
}

}  // namespace

absl::StatusOr<int64_t> FusedSize(const WeightMapRule& rule, const std::vector<int64_t>& rows,
                                  int64_t parts, const std::string& where) {
  if (rule.kind == Kind::kPad) {
    const int64_t m = rule.multiple;
    if (rows[0] > (int64_t{1} << 62) - m) return Invalid(where, "too many rows to pad");
    return (rows[0] + m - 1) / m * m;
  }
  int64_t pieces = parts;
  SDRT_ASSIGN_OR_RETURN(const std::vector<Cut> cuts, Cuts(rule, rows, pieces, where));
  int64_t piece_size = 0;
  for (const Cut& c : cuts) {
    if (c.per_piece > (int64_t{1} << 62) - piece_size) return Invalid(where, "too many rows");
    piece_size += c.per_piece;
  }
  if (piece_size == 0) return 0;  // components of no rows: a fused dim of none
  if (piece_size > (int64_t{1} << 62) / pieces) return Invalid(where, "too many rows");
  return pieces * piece_size;
}

absl::StatusOr<std::vector<FusedSegment>> FusedSegments(const WeightMapRule& rule,
                                              const std::vector<int64_t>& rows, int64_t size,
                                              int64_t parts, const std::string& where) {
  SDRT_ASSIGN_OR_RETURN(const int64_t expected, FusedSize(rule, rows, parts, where));
  if (size != expected) {
    return Invalid(where, rule.kind == Kind::kPad
                              ? absl::StrCat("the destination's dim ", rule.dim, " is ", size,
                                             "; the source's ", rows[0],
                                             " rounded up to a multiple of ", rule.multiple,
                                             " is expected")
                              : absl::StrCat("the fused dim is ", size, "; the components make ",
                                             expected));
  }
  std::vector<FusedSegment> out;
  if (rule.kind == Kind::kPad) {
    out.push_back({0, 0, 0, rows[0]});
    return out;
  }
  int64_t pieces = parts;
  SDRT_ASSIGN_OR_RETURN(const std::vector<Cut> cuts, Cuts(rule, rows, pieces, where));
  int64_t at = 0;
  for (int64_t p = 0; p < pieces; ++p) {
    for (size_t k = 0; k < cuts.size(); ++k) {
      const Cut& c = cuts[k];
      out.push_back({static_cast<int>(k), at, (p / c.replicas) * c.per_piece, c.per_piece});
      at += c.per_piece;
    }
  }
  return out;
}

absl::StatusOr<WeightMapRule> InBlocks(const WeightMapRule& rule, int64_t tile,
                                       const std::vector<int64_t>& rows,
                                       std::vector<int64_t>& block_rows, const std::string& where) {
  const auto whole = [&](int64_t n, absl::string_view what) -> absl::Status {
    if (n % tile == 0) return absl::OkStatus();
    return Invalid(where, absl::StrCat(what, " ", n, " is not whole ", tile,
                                       "-row blocks, so the FP8 scales cannot be fused"));
  };
  WeightMapRule out = rule;
  SDRT_RETURN_IF_ERROR(whole(rule.head_size, "the head size"));
  out.head_size = rule.head_size / tile;
  for (int64_t& n : out.sizes) {
    SDRT_RETURN_IF_ERROR(whole(n, "a component size"));
    n /= tile;
  }
  block_rows.clear();
  for (const int64_t n : rows) {
    SDRT_RETURN_IF_ERROR(whole(n, "a component of rows"));
    block_rows.push_back(n / tile);
  }
  return out;
}

WeightMapRule SourceSideOf(const WeightMapRule& regroup) {
  WeightMapRule side = regroup;
  side.interleave = regroup.source_interleave;
  return side;
}

std::vector<FusedSegment> FirstOfEach(const std::vector<FusedSegment>& segments, int component) {
  std::vector<FusedSegment> out;
  std::set<int64_t> seen;
  for (const FusedSegment& s : segments) {
    if (s.component == component && seen.insert(s.offset).second) out.push_back(s);
  }
  return out;
}

}  // namespace sdrt::internal
