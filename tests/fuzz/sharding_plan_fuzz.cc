// libFuzzer target: PLAN.json (ShardingPlan::FromJson, core/checkpoint/sharding_plan.h),
// then PlacementsFor on names taken from the input and on fixed ones, for a few shapes and
// meshes. A placement list returned has one placement per mesh dim, none Partial, and
// shards only dims the tensor has.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sdrt::ShardingPlan> plan = sdrt::ShardingPlan::FromJson(text, "PLAN.json");
  if (!plan.ok()) return 0;

  // Names: fixed ones each built-in role knows, and the input's tail (any bytes).
  std::vector<std::string> names = {"model.layers.0.self_attn.q_proj.weight",
                                    "model.layers.0.mlp.down_proj.bias", "lm_head.weight",
                                    "norm", ""};
  names.emplace_back(text.substr(text.size() > 24 ? text.size() - 24 : 0));
  const std::vector<sdrt::IntVector> shapes = {{}, {7}, {8, 4}, {3, 0, 5}};
  for (const char* mesh_shape : {"4", "2x2", "2x1x3"}) {
    absl::StatusOr<sdrt::DeviceMesh> mesh = sdrt::DeviceMesh::FromString(mesh_shape);
    SDRT_FUZZ_CHECK(mesh.ok());
    const bool mesh_ok = plan->CheckMesh(*mesh).ok();
    for (const std::string& name : names) {
      for (const sdrt::IntVector& shape : shapes) {
        absl::StatusOr<std::vector<sdrt::Placement>> placements =
            plan->PlacementsFor(name, shape, *mesh);
        if (!placements.ok()) continue;
        SDRT_FUZZ_CHECK(mesh_ok);
        SDRT_FUZZ_CHECK(static_cast<int>(placements->size()) == mesh->ndim());
        for (const sdrt::Placement& placement : *placements) {
          SDRT_FUZZ_CHECK(!placement.is_partial());
          if (placement.is_shard_like()) {
            SDRT_FUZZ_CHECK(placement.dim() >= 0 &&
                            placement.dim() < static_cast<int>(shape.size()));
          }
        }
      }
    }
  }
  return 0;
}
