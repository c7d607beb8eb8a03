#include "sdrt/tools/sdrt/internal/gpu_for_rank.h"

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

}  // namespace sdrt::cli
