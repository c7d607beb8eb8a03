// sdrt/c_api.h: sdrt_load, LoadStateDict into the engine's borrowed buffers.
#include <string>
#include <vector>

#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/tensor/status_macros.h"
#if SDRT_C_API_HAVE_DISTRIBUTED
#include "sdrt/core/distributed/load_state_dict.h"
#endif

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

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
    if (!checkpoint->source.has_value()) {
      return absl::UnimplementedError(
          "loading an sdrt sharded folder is not supported by the C API (it is a reshard from "
          "the folder's layout: `sdrt load DIR`); open a safetensors file or Hugging Face "
          "folder");
    }
#if SDRT_C_API_HAVE_DISTRIBUTED
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::CommOf(o.comm, false, "comm"));
    std::vector<int64_t> ranks;
    if (comm != nullptr) {
      for (int r = 0; r < comm->size(); ++r) ranks.push_back(r);
    } else if (o.rank >= 0) {
      ranks.push_back(o.rank);
    } else {
      return absl::InvalidArgumentError("options.rank is required without a communicator");
    }
    SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, state_dict->map));
    // Plain buffers become Replicate DTensors over every rank, which LoadStateDict fills in
    // place (it would replace a plain leaf by a new full tensor).
    SDRT_ASSIGN_OR_RETURN(sdrt::Map work, c_api::ReplicatePlainTensors(state_dict->map, ranks));
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
    SDRT_RETURN_IF_ERROR(c_api::WriteBack(state_dict->map, work));
    if (lo.strict && !result->missing_keys.empty()) {
      state_dict->DropViews();
      for (const std::string& key : result->missing_keys) state_dict->map.Erase(key);
    }
    if (o.num_missing != nullptr) *o.num_missing = static_cast<int64_t>(result->missing_keys.size());
    if (o.num_unexpected != nullptr) {
      *o.num_unexpected = static_cast<int64_t>(result->unexpected_keys.size());
    }
    return absl::OkStatus();
#else
    return absl::UnimplementedError("sdrt was built without MPI or NCCL (no sdrt_distributed)");
#endif
  });
}

}  // extern "C"
