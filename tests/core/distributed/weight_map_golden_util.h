// Helpers of the weight-map tests against tests/data/weight_map/expected.json (written by
// tests/golden/make_weight_map_golden.py): the golden, its tensors, the world mesh of the MPI
// test (whose main sets g_world) and a tensor cut over it. Test code only.
#ifndef SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_GOLDEN_UTIL_H_
#define SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_GOLDEN_UTIL_H_

#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tests/support/golden_codec.h"

namespace sdrt::testing_weight_map_golden {

inline MpiCommunicator* g_world = nullptr;

inline const nlohmann::json& Golden() {
  static const nlohmann::json* golden = [] {
    absl::StatusOr<nlohmann::json> j = testing_golden::ReadGoldenJson("weight_map/expected.json");
    return new nlohmann::json(j.ok() ? *std::move(j) : nlohmann::json());
  }();
  return *golden;
}

inline Tensor TensorOf(const nlohmann::json& j) {
  absl::StatusOr<Value> v = testing_golden::DecodeGoldenValue(j);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() && v->kind() == ValueKind::kTensor ? v->as_tensor() : Tensor();
}

inline std::shared_ptr<const DeviceMesh> World() {
  return std::make_shared<const DeviceMesh>(*DeviceMesh::Create({g_world->size()}));
}

// This rank's piece of `full` under `placements` on the world mesh.
inline Value Piece(const Tensor& full, const char* placements) {
  return Value(*DistributeTensor(full, World(), *ParsePlacements(placements), g_world->rank()));
}

}  // namespace sdrt::testing_weight_map_golden

#endif  // SDRT_TESTS_CORE_DISTRIBUTED_WEIGHT_MAP_GOLDEN_UTIL_H_
