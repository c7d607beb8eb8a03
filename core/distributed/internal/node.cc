#include "sdrt/core/distributed/internal/node.h"

#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

std::string HostName() {
  char name[kMaxHostNameBytes + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return std::string(name, strnlen(name, kMaxHostNameBytes));
}

absl::StatusOr<std::vector<int>> NodeOfRank(Communicator& comm, absl::Span<const int64_t> given) {
  std::vector<int> node;
  if (!given.empty()) {
    if (static_cast<int>(given.size()) != comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat("node_of_rank has ", given.size(),
                                                     " entries for ", comm.size(), " ranks"));
    }
    absl::flat_hash_map<int64_t, int> ids;
    for (int64_t g : given) {
      node.push_back(ids.emplace(g, static_cast<int>(ids.size())).first->second);
    }
    return node;
  }
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> hosts, comm.AllGatherBytes(HostName()));
  absl::flat_hash_map<std::string, int> ids;
  for (size_t q = 0; q < hosts.size(); ++q) {
    if (hosts[q].size() > kMaxHostNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", q, " sent a host name of ", hosts[q].size(), " bytes"));
    }
    node.push_back(ids.emplace(hosts[q], static_cast<int>(ids.size())).first->second);
  }
  return node;
}

}  // namespace sdrt::internal
