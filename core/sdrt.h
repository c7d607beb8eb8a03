// sdrt/sdrt.h: the one header a C++ program starts from. It includes the header each layer's
// user starts from (docs/ARCHITECTURE.md, "Public and private"): tensors and their views,
// distributed metadata (DTensor, ShardedTensor, DeviceMesh) and DistributeTensor, the CUDA
// runtime wrappers, the Communicator interface and the MPI communicator, state dicts,
// safetensors, sharded checkpoints and the distributed state-dict operations (in every
// build); plus the version (SDRT_VERSION_*, SDRT_ABI_VERSION, sdrt::Version(),
// sdrt::AbiVersion()). Every fallible call returns absl::Status or absl::StatusOr<T>.
// Installed as sdrt/sdrt.h; in the build tree include/sdrt/sdrt.h links here.
#ifndef SDRT_SDRT_H_
#define SDRT_SDRT_H_

#include "sdrt/export.h"
#include "sdrt/version.h"

#include "sdrt/tensor/tensor.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/comm/mpi_communicator.h"

#endif  // SDRT_SDRT_H_
