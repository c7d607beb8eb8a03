#include "sdrt/core/distributed/internal/mapping/mapped_load.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

absl::Status LowerLoad(const WeightMap::Compiled& map,
                       absl::Span<const SafetensorsTensorSpec> source, int64_t me, Device device,
                       Map& local, MappedLoad& out) {
  // This rank's description alone: the checkpoint's tensors as plain sources it holds, its
  // own leaves as destinations (a list per rank up to this one: a rank is bounded first).
  if (me < 0 || me >= kMaxMeshRanks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weight map: rank ", me, " is outside [0, ", kMaxMeshRanks, ") (a mesh's most ranks)"));
  }
  std::vector<std::vector<LeafLayout>> per_rank(static_cast<size_t>(me) + 1);
  std::vector<LeafLayout>& mine = per_rank.back();
  for (const SafetensorsTensorSpec& t : source) {
    LeafLayout& l = mine.emplace_back();
    l.path = t.name;
    l.source = true;
    l.dtype = t.dtype;
    l.shape = t.shape;
    l.kind = LeafLayout::Kind::kPlain;
  }
  SDRT_RETURN_IF_ERROR(DescribeStateDict(local, /*source=*/false, mine));
  SDRT_ASSIGN_OR_RETURN(const MapLowering lowering, LowerLeafLayouts(map, per_rank, /*quantize_on_senders=*/false));
  SDRT_RETURN_IF_ERROR(LowerLocals(lowering, me, device, local, out.mapped));
  absl::flat_hash_map<absl::string_view, absl::string_view> scales_of;  // FP8 leaf -> scales
  for (const QuantizedDestination& q : lowering.quantized) scales_of.emplace(q.path, q.scale_path);
  absl::flat_hash_set<absl::string_view> taken;  // the caller's leaves a rule replaces
  for (const LoweredDestination& d : lowering.destinations) {
    for (const std::string& path : d.leaves) {
      taken.insert(path);
      // Scales the quantize step writes (not those of codes that move as they are): each
      // FP8 leaf's, a split's parts several.
      const auto q = scales_of.find(path);
      if (d.quantized >= 0 && q != scales_of.end()) taken.insert(q->second);
    }
  }
  for (const RenamedDestination& r : lowering.renamed) taken.insert(r.path);
  SDRT_ASSIGN_OR_RETURN(const Leaves leaves, CollectLeaves(local));
  for (const Leaf& leaf : leaves) {
    if (taken.contains(leaf.path)) continue;
    out.lowered.Set(std::string(leaf.path), *leaf.value);
    out.kept.emplace_back(leaf.path);
  }
  for (const auto& [name, value] : out.mapped.destinations) out.lowered.Set(name, value);
  return absl::OkStatus();
}

absl::Status TakeBack(MappedLoad& load, Map& local) {
  SDRT_ASSIGN_OR_RETURN(MutableLeaves leaves, CollectMutableLeaves(local));
  absl::flat_hash_map<absl::string_view, Value*> by_path;
  for (MutableLeaf& leaf : leaves) by_path.emplace(leaf.path, leaf.value);
  for (auto& [path, value] : load.mapped.fresh) {
    const auto it = by_path.find(path);
    if (it != by_path.end()) *it->second = std::move(value);
  }
  load.mapped.fresh.clear();
  absl::flat_hash_map<absl::string_view, size_t> index_of;
  for (size_t i = 0; i < leaves.size(); ++i) index_of.emplace(leaves[i].path, i);
  std::vector<bool> erase(leaves.size(), false);
  bool erasing = false;
  for (const std::string& path : load.kept) {
    const auto it = index_of.find(path);
    if (it == index_of.end()) continue;
    if (const Value* now = load.lowered.Find(path)) {
      *leaves[it->second].value = *now;
    } else {
      erase[it->second] = erasing = true;
    }
  }
  if (erasing) EraseLeaves(leaves, erase);
  return absl::OkStatus();
}

}  // namespace sdrt::internal
