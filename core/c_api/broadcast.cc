// sdrt/c_api.h: sdrt_broadcast and sdrt_distribute (BroadcastStateDict, DistributeStateDict),
// writing into the borrowed buffers of `local`.
#include <vector>

#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

extern "C" {

sdrt_status_t sdrt_broadcast(sdrt_state_dict_t full, sdrt_state_dict_t local,
                             const sdrt_broadcast_options_t* options) {
  return Guard("sdrt_broadcast", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::NotNull(options, "options (comm is required)"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm,
                          c_api::CommOf(options->comm, true, "options.comm"));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* local_sd = nullptr;
    c_api::StateDictObject* full_sd = nullptr;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, options->timeout_seconds, "BroadcastStateDict", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(local_sd, c_api::Resolve(local, "local"));
          if (full != nullptr) {
            SDRT_ASSIGN_OR_RETURN(full_sd, c_api::Resolve(full, "full"));
          }
          SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(options->timeout_seconds));
          if (comm->rank() == options->root) SDRT_RETURN_IF_ERROR(c_api::NotNull(full, "full"));
          SDRT_RETURN_IF_ERROR(c_api::WaitForStream(options->stream, local_sd->map));
          if (full_sd == nullptr) return absl::OkStatus();
          return c_api::WaitForStream(options->stream, full_sd->map);
        }()));
    std::vector<int64_t> ranks;
    for (int r = 0; r < comm->size(); ++r) ranks.push_back(r);
    SDRT_ASSIGN_OR_RETURN(sdrt::Map work, c_api::ReplicatePlainTensors(local_sd->map, ranks));
    const sdrt::Map empty;
    sdrt::TransferStats stats;
    sdrt::BroadcastOptions bo;
    bo.comm = comm;
    bo.root = options->root;
    bo.bucket_bytes = options->bucket_bytes;
    bo.stats = &stats;
    absl::StatusOr<sdrt::BroadcastResult> result;
    {
      c_api::ScopedTimeout timeout(comm, options->timeout_seconds);
      result = sdrt::BroadcastStateDict(full_sd != nullptr ? full_sd->map : empty, work, bo);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    scope.stats().data_collectives = stats.exchanges;
    if (!result.ok()) return result.status();
    return c_api::WriteBack(local_sd->map, work);
  });
}

sdrt_status_t sdrt_distribute(sdrt_state_dict_t full, sdrt_state_dict_t local,
                              const sdrt_distribute_options_t* options) {
  return Guard("sdrt_distribute", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_distribute_options_t o =
        options != nullptr ? *options : sdrt_distribute_options_t SDRT_DISTRIBUTE_OPTIONS_INIT;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::CommOf(o.comm, false, "comm"));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* full_sd = nullptr;
    c_api::StateDictObject* local_sd = nullptr;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, o.timeout_seconds, "DistributeStateDict", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(full_sd, c_api::Resolve(full, "full"));
          SDRT_ASSIGN_OR_RETURN(local_sd, c_api::Resolve(local, "local"));
          SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
          SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, full_sd->map));
          return c_api::WaitForStream(o.stream, local_sd->map);
        }()));
    sdrt::Map work = local_sd->map;
    sdrt::DistributeOptions d;
    d.comm = comm;
    d.rank = o.rank;
    absl::Status status;
    {
      c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
      status = sdrt::DistributeStateDict(full_sd->map, work, d);
    }
    scope.stats().collectives = comm != nullptr ? 1 : 0;
    SDRT_RETURN_IF_ERROR(status);
    return c_api::WriteBack(local_sd->map, work);
  });
}

}  // extern "C"
