// Finding a rank's reshard locals in its state dicts (the one-shot transfer and BindReshard,
// reshard_state_dict.h): each plan tensor's leaf on either side, matched by path, and its
// local tensors checked against the rank's pieces. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LOCALS_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LOCALS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/core/distributed/internal/leaves.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/mapping/dequantize.h"
#include "sdrt/core/distributed/internal/mapping/quantize.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// The destination leaves a weight map makes (mapping/lowering.h), by plan tensor name:
// ShardedTensors over views of the destination's locals, renamed leaves. A node-based map,
// so that refs into its values stay valid.
struct MappedLeaves {
  std::map<std::string, Value> destinations;
  // Destination leaves given a new local (path, new value), for InstallFreshLocals.
  std::vector<std::pair<std::string, Value>> fresh;
  // FP8 leaves: quantized by the senders or from their staging (mapping/quantize.h), and
  // leaves dequantized from FP8 sources after each move (mapping/dequantize.h).
  QuantizeWork quantize;
  DequantizeWork dequantize;
};

// One rank's locals of both sides, and the destination leaves that get new ones.
struct FoundTransferLocals {
  MappedLeaves mapped;  // filled before FindTransferLocals; refs may point into it
  TransferLocals sources, destinations;
  MutableLeaves destination_leaves;
  std::vector<int64_t> destination_of;  // per plan tensor, its destination leaf or -1
  std::vector<size_t> fresh;            // plan tensors whose destination leaf gets new locals
};

// Fills `out` with rank `me`'s locals of every tensor of `plan` (on `device`): a DTensor's
// local, a ShardedTensor's local shard of the piece's box, a plain source tensor; a meta
// DTensor local or a plain destination leaf gets a new compact local (Tensor::Empty, held
// by out.destinations.owned, listed in out.fresh). Each local is checked (dtype, the
// piece's local shape, device) and its ref is a checked one (both sides' `checked` set on
// success). When `keep`, every ref points to a copy of the tensor handle held in `owned`
// (sharing its memory), so that the refs outlive the caller's trees; else into the trees,
// which must then outlive `out` unchanged. The caller's Values and DTensors are prefetched
// ahead of use (prefetch.h). A destination is looked up in out.mapped first (a padded leaf
// keeps its path), then in the tree. InvalidArgument naming the leaf and side when a rank's leaf is
// missing or a local does not fit its piece; CollectLeaves' errors; Tensor::Empty's.
absl::Status FindTransferLocals(const TransferPlan& plan, int64_t me, Device device,
                               const Map& source, Map& destination, bool keep,
                               FoundTransferLocals& out);

// Puts the new locals of out.fresh into their destination leaves: a DTensor gets its
// local (DTensor::WithLocal), a plain leaf becomes the full tensor; and the fused leaves
// of out.mapped.fresh their new values. Call it once, after
// the agreement, while the destination tree is unchanged since FindTransferLocals.
absl::Status InstallFreshLocals(FoundTransferLocals& found);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_LOCALS_H_
