// The parts of `sdrt load` (tools/sdrt/load.cc) around the load itself: rank 0's tensor
// list of SRC shared with every rank (ShardingPlan::MetaStateDict makes the state dict the
// load fills), and the check of every rank's pieces afterwards.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_
#define SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/checkpoint/sharding_plan.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tools/sdrt/internal/session.h"

namespace sdrt::cli {

// Rank 0's tensor list (from `source`, non-null on rank 0 only; what the engine's model
// definition knows), sent to every rank in one BroadcastBytes. The communicator's errors;
// InvalidArgument for a dtype name it cannot parse.
absl::StatusOr<std::vector<SafetensorsTensorSpec>> ShareTensorList(const Session& session,
                                                                   const CheckpointSource* source);

// Checks rank `rank`'s loaded pieces in `local` by xxh64 against `verify_dir`'s rank file
// (a sharded checkpoint; `mesh_text` is --mesh, for the message) or, when it is empty,
// against DistributeTensor of SRC's full tensors; returns the names that differ.
// InvalidArgument when `verify_dir` is of another mesh or plan (its pieces cannot match) or
// lacks a tensor; the errors of opening either.
absl::StatusOr<std::vector<std::string>> VerifyPieces(const std::string& verify_dir,
                                                      const std::string& src,
                                                      const std::string& mesh_text, int rank,
                                                      const DeviceMesh& mesh, const Map& local);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_LOAD_SETUP_H_
