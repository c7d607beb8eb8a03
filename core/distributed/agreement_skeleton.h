// What the ranks compare when they agree (core/distributed/agreement.h): a skeleton of
// the data about to move, as text or as a hash with a way to build the text. Shared by
// AgreeAcrossRanks and the verbs' code that builds skeletons from a state dict's leaves.
#ifndef SDRT_CORE_DISTRIBUTED_AGREEMENT_SKELETON_H_
#define SDRT_CORE_DISTRIBUTED_AGREEMENT_SKELETON_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "sdrt/export.h"

namespace sdrt SDRT_API {

// What every rank must share about the data it moves: one (path, description) per leaf,
// in walk order, e.g. ("layers.0.w", "DTensor float32[8, 4] [S(0)] on mesh (2, 2)").
// Descriptions leave out what differs between ranks by design (local shapes, values).
using AgreementSkeleton = std::vector<std::pair<std::string, std::string>>;

// A skeleton given by its hash and a way to build it, for state dicts of many leaves: the
// ranks compare `hash` (the same function of the same leaves on every rank, e.g. of a
// compact binary record per leaf), and `build` runs only when the hashes differ, to name
// the difference. Building the text of every leaf on every call costs more than the
// collective it guards once there are thousands of leaves.
struct HashedSkeleton {
  uint64_t hash = 0;
  std::function<AgreementSkeleton()> build;
};

}  // namespace SDRT_API

#endif  // SDRT_CORE_DISTRIBUTED_AGREEMENT_SKELETON_H_
