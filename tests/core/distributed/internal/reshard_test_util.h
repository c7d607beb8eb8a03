// Descriptor builders for the reshard tests (test code only).
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_RESHARD_TEST_UTIL_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_RESHARD_TEST_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/core/distributed/internal/reshard_plan.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"

namespace sdrt::test {

// A DTensor layout: a mesh of `shape` over `ranks` (empty: 0..N-1) with `placements`
// ("[S(0), R]"). Aborts the test binary on a malformed literal.
inline internal::ReshardLayout MeshLayout(IntVector shape, std::vector<int64_t> ranks,
                                          const char* placements) {
  internal::ReshardLayout layout;
  layout.mesh = std::make_shared<const DeviceMesh>(*DeviceMesh::Create(shape, std::move(ranks)));
  layout.placements = *ParsePlacements(placements);
  return layout;
}

inline internal::ReshardLayout BoxLayout(std::vector<internal::ReshardBox> boxes) {
  internal::ReshardLayout layout;
  layout.boxes = std::move(boxes);
  return layout;
}

inline internal::ReshardTensor Describe(std::string name, DType dtype, IntVector shape,
                                        internal::ReshardLayout source,
                                        internal::ReshardLayout destination) {
  return {std::move(name), dtype, std::move(shape), std::move(source), std::move(destination)};
}

}  // namespace sdrt::test

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_INTERNAL_RESHARD_TEST_UTIL_H_
