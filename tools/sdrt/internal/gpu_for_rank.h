// Which GPU a rank of a multi-rank command takes with --device cuda (session.h), from what
// the rank sees alone: how many CUDA devices are visible to it and where it stands among
// the ranks of its node. Pure arithmetic, so it is tested without a GPU.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_GPU_FOR_RANK_H_
#define SDRT_TOOLS_SDRT_INTERNAL_GPU_FOR_RANK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sdrt::cli {

// The CUDA device (an ordinal among the visible ones) of the rank with node-local rank
// `local_rank` of the `local_size` ranks on its node, which sees `visible_devices` devices:
//   - exactly one visible device: device 0, whatever local_size. This is one GPU per rank
//     through CUDA_VISIBLE_DEVICES (what Slurm and most launchers do); ranks that were all
//     left the same one GPU are caught by NCCL at init (NcclCommunicator::Create, "Duplicate
//     GPU detected"), since the rank cannot tell which GPU its one device is;
//   - at least local_size visible devices: device local_rank, so that no two ranks of a
//     node share one;
//   - FailedPrecondition "--device cuda: ..." when none is visible, and when 1 <
//     visible_devices < local_size (more ranks on the node than GPUs to go round), naming
//     both numbers.
// InvalidArgument for visible_devices < 0, local_size < 1 or local_rank outside
// [0, local_size).
absl::StatusOr<int> GpuForRank(int visible_devices, int local_rank, int local_size);

// Whether two ranks were given one GPU: `gpus[q]` is rank q's (its host name and its GPU's
// PCI bus id, CudaPciBusId, as one string). InvalidArgument naming the first two ranks that
// share one and the GPU (NCCL would refuse them at its init, but only on those ranks,
// while the others waited for them there until the deadline); OK otherwise.
absl::Status RefuseSharedGpus(const std::vector<std::string>& gpus);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_GPU_FOR_RANK_H_
