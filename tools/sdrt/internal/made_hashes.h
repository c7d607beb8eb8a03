// The index's full XXH64 of the tensors a mapped `sdrt reshard` makes anew (tools/sdrt/
// reshard.cc: fused, padded, cast; INDIR has no hash for them), each with no full tensor
// anywhere when its pieces are row ranges of it that the target ranks hold in rank order (a
// Shard(0) cut, as the tp plan gives every fused tensor): one XXH64 state per such tensor
// goes from rank to rank, each adding its rows, by one broadcast per rank that holds rows.
// Any other such tensor is brought whole to rank 0 once, a bucket at a time, by the same
// engine. Not public API.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_MADE_HASHES_H_
#define SDRT_TOOLS_SDRT_INTERNAL_MADE_HASHES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tools/sdrt/internal/engine_index.h"
#include "sdrt/tools/sdrt/internal/runner.h"

namespace sdrt::cli {

// Fills the xxh64 of every tensor of `e` whose group is not as_in_source, on every rank alike,
// from `destination` (this rank's locals of e's layout, filled; empty off the target mesh).
// Collective over `run`. The errors of the broadcasts and of ReshardStateDict, agreed.
absl::Status HashMadeTensors(EngineIndex& e, const Map& destination, Runner& run,
                             int64_t bucket_bytes);

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_MADE_HASHES_H_
