// sdrt/c_api.h: sdrt_load, LoadStateDict (any checkpoint kind, any read, a weight map) into
// the engine's borrowed buffers.
#include <string>
#include <utility>
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

absl::StatusOr<sdrt::ReadMode> ReadModeOf(int32_t read) {
  switch (read) {
    case SDRT_READ_AUTO:
      return sdrt::ReadMode::kAuto;
    case SDRT_READ_ALL:
      return sdrt::ReadMode::kAll;
    case SDRT_READ_ROOT:
      return sdrt::ReadMode::kRoot;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("options.read ", read,
                       " is not SDRT_READ_AUTO (0), SDRT_READ_ALL (1) or "
                       "SDRT_READ_ROOT (2)"));
  }
}

// The figures of a load in the C stats: the load's own, and those of the broadcast (read
// ROOT) or the reshard (a sharded folder) that moved the bytes.
void Report(const sdrt::LoadStats& stats, sdrt_stats_t& s) {
  s.bytes_read = stats.bytes_read;
  s.bytes_kept = stats.bytes_kept;
  s.reads = stats.reads;
  s.bytes_sent = stats.transfer.sent_bytes;
  s.bytes_received = stats.transfer.received_bytes;
  s.collectives = stats.transfer.collectives;
  s.data_collectives = stats.transfer.exchanges;
}

}  // namespace

extern "C" {

sdrt_status_t sdrt_load(sdrt_checkpoint_t checkpoint, sdrt_state_dict_t state_dict,
                        const sdrt_load_options_t* options) {
  return Guard("sdrt_load", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_load_options_t o = options != nullptr ? *options
                                                      : sdrt_load_options_t SDRT_LOAD_OPTIONS_INIT;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::CommOf(o.comm, false, "comm"));
    // The communicator found, what this rank refuses every rank returns.
    c_api::CheckpointObject* ckpt = nullptr;
    c_api::StateDictObject* sd = nullptr;
    sdrt::ReadMode read = sdrt::ReadMode::kAuto;
    sdrt::WeightMap weight_map;
    std::vector<int64_t> ranks;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, o.timeout_seconds, "LoadStateDict", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(ckpt, c_api::Resolve(checkpoint, "checkpoint"));
          SDRT_ASSIGN_OR_RETURN(sd, c_api::Resolve(state_dict, "state_dict"));
          SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
          SDRT_ASSIGN_OR_RETURN(read, ReadModeOf(o.read));
          SDRT_ASSIGN_OR_RETURN(weight_map, c_api::WeightMapOf(o.weight_map, "options.weight_map"));
          if (comm != nullptr) {
            for (int r = 0; r < comm->size(); ++r) ranks.push_back(r);
          } else if (o.rank >= 0) {
            ranks.push_back(o.rank);
          } else {
            return absl::InvalidArgumentError("options.rank is required without a communicator");
          }
          return c_api::WaitForStream(o.stream, sd->map);
        }()));
    // Plain buffers become Replicate DTensors over every rank, which the load fills in
    // place (it would replace a plain leaf by a new full tensor).
    SDRT_ASSIGN_OR_RETURN(sdrt::Map work, c_api::ReplicatePlainTensors(sd->map, ranks));
    sdrt::LoadStats stats;
    sdrt::LoadOptions lo;
    lo.comm = comm;
    lo.read = read;
    lo.rank = o.rank;
    lo.strict = o.strict != 0;
    lo.staging_buffers = o.staging_buffers;
    lo.staging_bytes = o.staging_bytes;
    lo.direct_io = o.direct_io != 0;
    lo.max_gap_bytes = o.max_gap_bytes;
    lo.bucket_bytes = o.bucket_bytes;
    lo.weight_map = std::move(weight_map);
    lo.readers = o.readers;
    lo.share_reads = o.share_reads != 0;
    lo.stats = &stats;
    absl::StatusOr<sdrt::LoadResult> result;
    {
      c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
      result = sdrt::LoadStateDict(*ckpt->source, work, lo);
    }
    Report(stats, scope.stats());
    if (!result.ok()) return result.status();
    // The results copied into the caller's buffers where they landed elsewhere, the
    // missing entries removed when strict, the counts reported.
    SDRT_RETURN_IF_ERROR(c_api::WriteBack(sd->map, work));
    if (lo.strict && !result->missing_keys.empty()) {
      sd->DropViews();
      for (const std::string& key : result->missing_keys) sd->map.Erase(key);
    }
    if (o.num_missing != nullptr)
      *o.num_missing = static_cast<int64_t>(result->missing_keys.size());
    if (o.num_unexpected != nullptr) {
      *o.num_unexpected = static_cast<int64_t>(result->unexpected_keys.size());
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
