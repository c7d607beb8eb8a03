// The checkpoint's tensor list, sent by the root of a kRoot load. A weight map and FP8
// leaves are lowered on every rank from that list (mapping/mapped_load.h), but with kRoot
// only rank 0 is sure to see the checkpoint: it sends its list to the others. Not public
// API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_ROOT_TENSORS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_ROOT_TENSORS_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/checkpoint/checkpoint_source.h"
#include "sdrt/core/io/safetensors.h"

namespace sdrt::internal {

// Collective over `comm`: rank 0's `source` tensors (name, dtype, global shape, in the
// source's order) on every rank when rank 0 passes `send` (it needs the lowering; its
// `source` is then not null), sent as a safetensors header (its parser, the reader's,
// checks what a peer sends as it checks a file); nullopt on every rank otherwise (one
// byte sent). `send` is read on rank 0 only. Errors, the same on every rank: InvalidArgument
// when the list is larger than a safetensors header may be (kSafetensorsMaxHeaderBytes) or
// a received list is malformed; the communicator's (DeadlineExceeded past its timeout).
absl::StatusOr<std::optional<std::vector<SafetensorsTensorSpec>>> ShareRootTensors(
    Communicator& comm, const CheckpointSource* source, bool send);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_LOAD_ROOT_TENSORS_H_
