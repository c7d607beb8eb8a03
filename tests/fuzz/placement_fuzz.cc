// libFuzzer target: the strings a user or a file gives for placements, meshes and devices:
// ParsePlacements / ParsePlacement (tensor/dtensor/placement.h), DeviceMesh::FromString
// (tensor/dtensor/device_mesh.h), ParseDevice (tensor/device.h) and ParseRemoteDevice
// (tensor/dtensor/sharded_tensor.h). What parses must print and parse back to itself.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "sdrt/tensor/device.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<std::vector<sdrt::Placement>> placements = sdrt::ParsePlacements(text);
  if (placements.ok()) {
    absl::StatusOr<std::vector<sdrt::Placement>> again =
        sdrt::ParsePlacements(sdrt::PlacementsToString(*placements));
    SDRT_FUZZ_CHECK(again.ok() && *again == *placements);
  }
  absl::StatusOr<sdrt::Placement> placement = sdrt::ParsePlacement(text);
  if (placement.ok()) {
    absl::StatusOr<sdrt::Placement> again = sdrt::ParsePlacement(placement->ToString());
    SDRT_FUZZ_CHECK(again.ok() && *again == *placement);
  }

  absl::StatusOr<sdrt::DeviceMesh> mesh = sdrt::DeviceMesh::FromString(text);
  if (mesh.ok()) {
    int64_t product = 1;
    for (int64_t extent : mesh->shape()) {
      SDRT_FUZZ_CHECK(extent >= 1);
      product *= extent;
    }
    SDRT_FUZZ_CHECK(product == mesh->num_ranks() && product <= sdrt::kMaxMeshRanks);
    SDRT_FUZZ_CHECK(!mesh->ToString().empty());
  }

  absl::StatusOr<sdrt::Device> device = sdrt::ParseDevice(text);
  if (device.ok()) {
    absl::StatusOr<sdrt::Device> again = sdrt::ParseDevice(device->ToString());
    SDRT_FUZZ_CHECK(again.ok() && *again == *device);
  }
  absl::StatusOr<sdrt::RemoteDevice> remote = sdrt::ParseRemoteDevice(text);
  if (remote.ok()) {
    absl::StatusOr<sdrt::RemoteDevice> again = sdrt::ParseRemoteDevice(remote->ToString());
    SDRT_FUZZ_CHECK(again.ok() && again->rank == remote->rank && again->device == remote->device);
  }
  return 0;
}
