// sdrt/c_api.h: sdrt_load, LoadStateDict (or, for an sdrt sharded folder,
// LoadShardedCheckpoint) into the engine's borrowed buffers.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/load_state_dict.h"
#include "sdrt/tensor/status_macros.h"

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

namespace {

// After a load into `work` (state_dict's entries, plain ones as Replicate DTensors): the
// results copied into the caller's buffers where they landed elsewhere, the missing entries
// removed when strict, the counts reported.
absl::Status Finish(sdrt_state_dict_s& state_dict, const sdrt::Map& work,
                    const sdrt::LoadResult& result, const sdrt_load_options_t& o) {
  SDRT_RETURN_IF_ERROR(c_api::WriteBack(state_dict.map, work));
  if (o.strict != 0 && !result.missing_keys.empty()) {
    state_dict.DropViews();
    for (const std::string& key : result.missing_keys) state_dict.map.Erase(key);
  }
  if (o.num_missing != nullptr) *o.num_missing = static_cast<int64_t>(result.missing_keys.size());
  if (o.num_unexpected != nullptr) {
    *o.num_unexpected = static_cast<int64_t>(result.unexpected_keys.size());
  }
  return absl::OkStatus();
}

// An sdrt sharded folder: resharded from its layout into the caller's buffers
// (LoadShardedCheckpoint), the staging size serving as the reshard's bucket.
absl::Status LoadShardedFolder(const std::string& dir, sdrt_state_dict_s& state_dict,
                               sdrt::Map work, sdrt::Communicator* comm,
                               const sdrt_load_options_t& o, sdrt_stats_t& s) {
  if (o.rank >= 0 && o.rank != comm->rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "options.rank ", o.rank, " is not the communicator's rank ", comm->rank(),
        " (an sdrt sharded folder is loaded by the communicator's ranks)"));
  }
  if (o.direct_io != 0) {
    return absl::InvalidArgumentError(
        "options.direct_io does not apply to an sdrt sharded folder (its rank files are "
        "mapped)");
  }
  sdrt::LoadStats stats;
  sdrt::ReshardStats reshard;
  sdrt::LoadShardedOptions lo;
  lo.comm = comm;
  lo.strict = o.strict != 0;
  lo.bucket_bytes = o.staging_bytes;
  lo.stats = &stats;
  lo.reshard_stats = &reshard;
  absl::StatusOr<sdrt::LoadResult> result;
  {
    c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
    result = sdrt::LoadShardedCheckpoint(dir, work, lo);
  }
  s.bytes_read = stats.bytes_read;
  s.bytes_kept = stats.bytes_kept;
  s.reads = stats.reads;
  s.bytes_sent = reshard.sent_bytes;
  s.bytes_received = reshard.received_bytes;
  s.collectives = reshard.collectives;
  if (!result.ok()) return result.status();
  return Finish(state_dict, work, *result, o);
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_load(sdrt_checkpoint_t checkpoint, sdrt_state_dict_t state_dict,
                        const sdrt_load_options_t* options) {
  return Guard("sdrt_load", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::NotNull(checkpoint, "checkpoint"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(state_dict, "state_dict"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_load_options_t o = options != nullptr ? *options
                                                      : sdrt_load_options_t SDRT_LOAD_OPTIONS_INIT;
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::CommOf(o.comm, false, "comm"));
    if (!checkpoint->source.has_value() && comm == nullptr) {
      return absl::InvalidArgumentError(
          "options.comm is required to load an sdrt sharded folder (its pieces move between "
          "ranks)");
    }
    std::vector<int64_t> ranks;
    if (comm != nullptr) {
      for (int r = 0; r < comm->size(); ++r) ranks.push_back(r);
    } else if (o.rank >= 0) {
      ranks.push_back(o.rank);
    } else {
      return absl::InvalidArgumentError("options.rank is required without a communicator");
    }
    SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, state_dict->map));
    // Plain buffers become Replicate DTensors over every rank, which the load fills in
    // place (it would replace a plain leaf by a new full tensor).
    SDRT_ASSIGN_OR_RETURN(sdrt::Map work, c_api::ReplicatePlainTensors(state_dict->map, ranks));
    if (!checkpoint->source.has_value()) {
      return LoadShardedFolder(checkpoint->sharded_dir, *state_dict, std::move(work), comm, o,
                               scope.stats());
    }
    sdrt::LoadStats stats;
    sdrt::LoadOptions lo;
    lo.comm = comm;
    lo.rank = o.rank;
    lo.strict = o.strict != 0;
    lo.staging_buffers = o.staging_buffers;
    lo.staging_bytes = o.staging_bytes;
    lo.direct_io = o.direct_io != 0;
    lo.max_gap_bytes = o.max_gap_bytes;
    lo.stats = &stats;
    absl::StatusOr<sdrt::LoadResult> result;
    {
      c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
      result = sdrt::LoadStateDict(*checkpoint->source, work, lo);
    }
    sdrt_stats_t& s = scope.stats();
    s.bytes_read = stats.bytes_read;
    s.bytes_kept = stats.bytes_kept;
    s.reads = stats.reads;
    if (!result.ok()) return result.status();
    return Finish(*state_dict, work, *result, o);
  });
}

}  // extern "C"
