#include "sdrt/tools/sdrt/internal/gpu_for_rank.h"

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace sdrt::cli {

absl::StatusOr<int> GpuForRank(int visible_devices, int local_rank, int local_size) {
  if (visible_devices < 0 || local_size < 1 || local_rank < 0 || local_rank >= local_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GpuForRank: need visible_devices >= 0 and 0 <= local_rank < local_size; got ",
        visible_devices, " visible devices, local rank ", local_rank, " of ", local_size));
  }
  if (visible_devices == 0) {
    return absl::FailedPreconditionError("--device cuda: no CUDA device is visible");
  }
  if (visible_devices == 1) return 0;
  if (visible_devices < local_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--device cuda: ", local_size, " ranks run on this node but each sees only ",
        visible_devices, " CUDA devices; each rank needs its own GPU, so start at most ",
        visible_devices,
        " ranks per node, or give each rank one GPU of its own "
        "(CUDA_VISIBLE_DEVICES)"));
  }
  return local_rank;
}

absl::Status RefuseSharedGpus(const std::vector<std::string>& gpus) {
  absl::flat_hash_map<std::string, size_t> first;
  for (size_t q = 0; q < gpus.size(); ++q) {
    const auto [it, fresh] = first.try_emplace(gpus[q], q);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device cuda: ranks ", it->second, " and ", q, " were given one GPU (", gpus[q],
          "); each rank needs its own: one GPU per rank through CUDA_VISIBLE_DEVICES, or "
          "every GPU visible to every rank of the node"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::cli
