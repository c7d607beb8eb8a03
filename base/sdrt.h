// sdrt/sdrt.h: the one header a C++ program starts from. It includes every public header a
// user calls (docs/ARCHITECTURE.md, "The umbrella header"), the same in every build (a
// backend that was not built answers Unavailable at run time, not by a missing header):
//   tensors, their views and DLPack; DTensor, ShardedTensor, DeviceMesh, the sharding
//     arithmetic and DistributeTensor;
//   the CUDA runtime wrappers;
//   communicators: the Communicator interface, MPI, NCCL, the one-process
//     SelfCommunicator, ProcessGroup and DeviceMeshComm;
//   state dicts and their operations (offload, copy, flatten);
//   safetensors, checkpoint sources (files, Hugging Face folders), sharded checkpoints,
//     sharding plans, parallel layouts (Megatron, vLLM, FSDP) and Hugging Face folder
//     writing;
//   the verbs over ranks: gather, broadcast, distribute (distributed_state_dict.h), load
//     (load_state_dict.h), reshard (reshard_state_dict.h), the DTensor collectives and the
//     agreement across ranks;
// plus the version (SDRT_VERSION_*, SDRT_ABI_VERSION, sdrt::Version(), sdrt::AbiVersion()).
// Every fallible call returns absl::Status or absl::StatusOr<T>. Lives in base/, below every
// layer; installed as sdrt/sdrt.h, and in the build tree include/sdrt/sdrt.h links here.
#ifndef SDRT_SDRT_H_
#define SDRT_SDRT_H_

#include "sdrt/export.h"
#include "sdrt/version.h"

#include "sdrt/tensor/tensor.h"
#include "sdrt/tensor/backend/dlpack.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/comm/mpi_communicator.h"
#include "sdrt/comm/nccl_communicator.h"
#include "sdrt/comm/process_group.h"
#include "sdrt/comm/self_communicator.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/core/state_dict/state_dict_ops.h"
#include "sdrt/core/state_dict/flatten.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/hf_checkpoint_writer.h"
#include "sdrt/core/checkpoint/hf_folder.h"
#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/checkpoint/sharded_checkpoint.h"
#include "sdrt/core/checkpoint/sharded_checkpoint_writer.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/agreement_skeleton.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/distributed/dtensor_ops.h"
#include "sdrt/core/distributed/load_options.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"

#endif  // SDRT_SDRT_H_
