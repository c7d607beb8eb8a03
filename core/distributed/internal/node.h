// Which ranks share a node (a host): for the reshard's once-per-node forwarding and the
// load's once-per-node reads. Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_NODE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_NODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"

namespace sdrt::internal {

// Host names longer than this are refused in a peer's message (POSIX: HOST_NAME_MAX 255).
inline constexpr size_t kMaxHostNameBytes = 255;

// This machine's host name ("" when gethostname fails: then every such rank shares one).
std::string HostName();

// The node of every rank of `comm`, numbered 0, 1, ... by first appearance: `given` when it
// is not empty (one entry per rank, any values, equal ones sharing a node: InvalidArgument
// for another length), else the ranks' host names, exchanged in one AllGatherBytes
// (collective: every rank calls it; its errors, and InvalidArgument for a host name longer
// than kMaxHostNameBytes).
absl::StatusOr<std::vector<int>> NodeOfRank(Communicator& comm, absl::Span<const int64_t> given);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_NODE_H_
