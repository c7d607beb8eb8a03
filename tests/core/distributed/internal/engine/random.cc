#include "sdrt/tests/core/distributed/internal/engine/random.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"

namespace sdrt::test {

using internal::TransferBox;
using internal::TransferLayout;

std::vector<int64_t> Random::Subset(int64_t world, int64_t n, int64_t first) {
  std::vector<int64_t> ranks(static_cast<size_t>(world));
  for (int64_t r = 0; r < world; ++r) ranks[r] = first + r;
  std::shuffle(ranks.begin(), ranks.end(), engine_);
  ranks.resize(static_cast<size_t>(n));
  return ranks;
}

TransferLayout RandomMesh(Random& rng, int64_t world, int ndim, int64_t first,
                         const ReduceOp* partial) {
  const int64_t n = rng.Uniform(1, world);
  std::vector<int64_t> ranks = rng.Subset(world, n, first);
  // 1-3 axes whose sizes multiply to n.
  IntVector shape;
  int64_t left = n;
  const int64_t axes = rng.Uniform(1, 3);
  for (int64_t a = 0; a + 1 < axes; ++a) {
    std::vector<int64_t> divisors;
    for (int64_t d = 1; d <= left; ++d) {
      if (left % d == 0) divisors.push_back(d);
    }
    const int64_t size = divisors[static_cast<size_t>(rng.Uniform(0, divisors.size() - 1))];
    shape.push_back(size);
    left /= size;
  }
  shape.push_back(left);
  TransferLayout layout;
  layout.mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape, ranks));
  for (size_t a = 0; a < shape.size(); ++a) {
    const int64_t kind = ndim == 0 ? 0 : rng.Uniform(0, 2);
    const int dim = ndim == 0 ? 0 : static_cast<int>(rng.Uniform(0, ndim - 1));
    if (partial != nullptr && rng.Chance(40)) {
      layout.placements.push_back(Placement::Partial(*partial));
      continue;
    }
    layout.placements.push_back(kind == 0   ? Placement::Replicate()
                                : kind == 1 ? Placement::Shard(dim)
                                            : Placement::StridedShard(dim, rng.Uniform(1, 3)));
  }
  return layout;
}

TransferLayout RandomBoxes(Random& rng, int64_t world, const IntVector& shape) {
  TransferLayout layout;
  if (shape.empty()) {
    layout.boxes.push_back({{}, {}, rng.Uniform(0, world - 1)});
    return layout;
  }
  std::vector<RemoteDevice> devices;
  for (int64_t r : rng.Subset(world, rng.Uniform(1, world))) devices.push_back({r, Device::CPU()});
  const int dim = static_cast<int>(rng.Uniform(0, static_cast<int64_t>(shape.size()) - 1));
  const std::vector<ShardMetadata> spec = *ChunkShardingSpec(dim, devices, shape);
  for (const ShardMetadata& m : spec) {
    layout.boxes.push_back({m.offsets, m.sizes, m.placement.rank});
    if (rng.Chance(15)) layout.boxes.push_back({m.offsets, m.sizes, rng.Uniform(0, world - 1)});
  }
  return layout;
}

std::string LayoutString(const TransferLayout& layout) {
  if (layout.mesh != nullptr) {
    return absl::StrCat(layout.mesh->ToString(), " ", PlacementsToString(layout.placements));
  }
  std::vector<std::string> boxes;
  for (const TransferBox& b : layout.boxes) {
    boxes.push_back(
        absl::StrCat(ShapeToString(b.offsets), "+", ShapeToString(b.sizes), "@", b.rank));
  }
  return absl::StrCat("boxes {", absl::StrJoin(boxes, " "), "}");
}

}  // namespace sdrt::test
