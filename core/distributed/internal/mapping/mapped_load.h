// LoadStateDict with a weight map (load_state_dict.h, LoadOptions::weight_map): the
// checkpoint is the source, the caller's state dict the destination. Each rank lowers its
// own destination (lowering.h) from the checkpoint's header and its own leaves (a DTensor's
// or ShardedTensor's layout names every rank's pieces), so no exchange is needed: the
// lowered state dict holds the leaves no rule touches as they are, plus one ShardedTensor
// per source tensor a rule reads, whose local shards are views of the destination's locals,
// and renamed leaves under their sources' names. Any of the load's paths then fills it;
// afterwards what the path replaced goes back into the caller's tree. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_MAPPED_LOAD_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_MAPPED_LOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "sdrt/core/io/safetensors.h"
#include "sdrt/core/distributed/internal/engine/locals.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/device.h"

namespace sdrt::internal {

struct MappedLoad {
  Map lowered;         // what the load fills
  MappedLeaves mapped;  // its mapped leaves (the views) and the new locals made for them
  // The caller's leaves that `lowered` holds under the same path, to take back.
  std::vector<std::string> kept;
};

// Lowers `local` (rank `me`'s, new tensors on `device`) against the checkpoint's tensors
// `source` (CheckpointSource::TensorSpecs, or with kRoot rank 0's, root_tensors.h).
// LowerLeafLayouts' and LowerLocals' errors.
absl::Status LowerLoad(const WeightMap::Compiled& map,
                       absl::Span<const SafetensorsTensorSpec> source, int64_t me, Device device,
                       Map& local, MappedLoad& out);

// After the load: the new locals made for mapped leaves installed, and each kept leaf set
// to what the load left in `lowered` (a fresh local, a full tensor), or removed where the
// load removed it (strict).
absl::Status TakeBack(MappedLoad& load, Map& local);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_MAPPING_MAPPED_LOAD_H_
