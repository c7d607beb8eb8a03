// Agreement before data moves: the distributed state-dict operations describe what each
// rank is about to move (one entry per leaf: its path and a description without per-rank
// values) and what went wrong locally, and exchange a hash of it in one small collective,
// so that a mismatch or a local error becomes the same error on every rank, found before
// any data collective (case-012, case-015, case-016). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/core/state_dict/state_dict.h"

namespace sdrt::internal {

// (path, description) per leaf, in walk order.
using Skeleton = std::vector<std::pair<std::string, std::string>>;

// What every rank must agree on about a leaf: "DTensor float32[8, 4] [S(0)] on mesh (2, 2)",
// "ShardedTensor bfloat16[10]", "Tensor int64[3]", or the kind of a non-tensor ("int").
// Local shapes and values are left out: they differ between ranks by design.
std::string DescribeForAgreement(const Value& value);

// Collective over `comm` (two calls when the skeletons differ, else one): OK when no rank
// reports an error and every rank's skeleton equals rank 0's. Otherwise every rank returns
// the same status: the local errors as "<op>: rank R: <message>" (the code of the lowest
// failing rank; at most four ranks listed), or InvalidArgument "<op>: ranks disagree at
// '<path>': rank 0 has <description>, rank R has <description>" for the first differing
// leaf of the lowest rank that differs (a leaf one rank lacks is described as "nothing").
// Counts its calls in `stats` when not null.
absl::Status AgreeAcrossRanks(Communicator& comm, absl::string_view op, const Skeleton& skeleton,
                              const absl::Status& local_error, CollectiveStats* stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_AGREEMENT_H_
