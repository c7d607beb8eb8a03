// How the lowering's results are kept (lowering_steps.h): a lowered leaf checked and
// emitted, and every rank's descriptions rewritten with the lowered leaves in place of those
// they replace.
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/mapping/lowering_steps.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

absl::Status Invalid(const std::string& where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

// Fails when a rank holds one element of `d` in two boxes (two views would take it).
absl::Status CheckNoTwice(const LoweredDestination& d, const std::string& where) {
  std::set<std::tuple<int64_t, IntVector, IntVector>> seen;
  for (const TransferBox& box : d.boxes) {
    if (!seen.emplace(box.rank, box.offsets, box.sizes).second) {
      return Invalid(where, absl::StrCat("rank ", box.rank, " would take '", d.name, "' at ",
                                         ShapeToString(box.offsets), " twice"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// Appends lowered leaf `d` to `out` and its description to `leaves` (its anchor's), once
// checked: its box count, no element twice on a rank, an FP8 leaf's blocks.
absl::Status Emit(LoweredDestination d, const std::string& where, MapLowering& out,
                  std::vector<LeafLayout>& leaves) {
  if (static_cast<int64_t>(d.boxes.size()) > kMaxTransferBoxes) {
    return Invalid(where, absl::StrCat("more than ", kMaxTransferBoxes, " boxes"));
  }
  SDRT_RETURN_IF_ERROR(CheckNoTwice(d, where));
  if (d.quantized >= 0) {
    std::vector<int64_t> starts;
    starts.reserve(d.views.size());
    for (const LoweredView& v : d.views) starts.push_back(v.start);
    SDRT_RETURN_IF_ERROR(CheckQuantizedBoxes(out.quantized[static_cast<size_t>(d.quantized)],
                                             d.name, d.source_dtype, d.dim, d.boxes, starts,
                                             where));
  }
  LeafLayout& leaf = leaves.emplace_back();
  leaf.path = d.name;
  leaf.source = false;
  leaf.dtype = d.dtype;
  leaf.shape = d.shape;
  leaf.kind = LeafLayout::Kind::kBoxes;
  leaf.boxes = d.boxes;
  out.destinations.push_back(std::move(d));
  return absl::OkStatus();
}

absl::Status ReplaceLoweredLeaves(const LoweringSides& sides, AnchoredLeaves& anchored,
                                  const std::set<SideKey>& removed,
                                  const std::map<std::string, std::string>& renames,
                                  std::vector<std::vector<LeafLayout>>& per_rank) {
  // Every rank's description of a leaf the lowering replaces must be the first one's (the
  // lowering reads the first alone; MergeLeafLayouts will not see the others).
  for (int rank = 0; rank < static_cast<int>(per_rank.size()); ++rank) {
    for (const LeafLayout& l : per_rank[rank]) {
      const SideKey key{l.path, false};
      if (l.source || !removed.count(key)) continue;
      const SideInfo& first = sides.at(key);
      if (first.first_rank != rank && !SameDescription(*first.layout, l)) {
        return absl::InvalidArgumentError(
            absl::StrCat("reshard: ranks ", first.first_rank, " and ", rank,
                         " describe the destination of '", l.path, "' differently"));
      }
    }
  }
  for (int rank = 0; rank < static_cast<int>(per_rank.size()); ++rank) {
    std::vector<LeafLayout> rewritten;
    rewritten.reserve(per_rank[rank].size());
    for (LeafLayout& l : per_rank[rank]) {
      if (!l.source) {
        const SideKey key{l.path, false};
        if (removed.count(key)) {
          const SideInfo& first = sides.at(key);
          const auto anchor = anchored.find(key);
          if (anchor != anchored.end() && first.first_rank == rank) {
            for (LeafLayout& c : anchor->second) rewritten.push_back(std::move(c));
          }
          continue;
        }
        const auto renamed = renames.find(l.path);
        if (renamed != renames.end()) l.path = renamed->second;
      }
      rewritten.push_back(std::move(l));
    }
    per_rank[rank] = std::move(rewritten);
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
