// sdrt/c_api.h: reshard plans (PlanReshard once, ExecuteReshard every step) and plans bound
// to one pair of state dicts' buffers (BindReshard once, BoundReshard::Execute every step).
#include <memory>
#include <utility>
#include <vector>

#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"

struct sdrt_reshard_plan_s {
  sdrt::ReshardPlan plan;
  sdrt::Communicator* comm = nullptr;
};
// A bound plan and what each step adds to it: the entries whose result is not written in
// the caller's buffer (a plain destination tensor, which the library replaces by a new
// full one), copied there after every step, and the source, whose CUDA buffers the
// execute options' stream is waited for on.
struct sdrt_reshard_bound_s {
  sdrt::BoundReshard bound;
  sdrt::Communicator* comm = nullptr;
  sdrt::Map source;
  std::vector<std::pair<sdrt::Tensor, sdrt::Tensor>> write_back;  // (caller's, result)
};

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

extern "C" {

sdrt_status_t sdrt_reshard_plan_create(sdrt_state_dict_t source, sdrt_state_dict_t destination,
                                       const sdrt_reshard_options_t* options,
                                       sdrt_reshard_plan_t* out) {
  return Guard("sdrt_reshard_plan_create", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(source, "source"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(destination, "destination"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(options, "options (comm is required)"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(options->timeout_seconds));
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm,
                          c_api::CommOf(options->comm, true, "options.comm"));
    sdrt::ReshardOptions ro;
    ro.comm = comm;
    ro.bucket_bytes = options->bucket_bytes;
    c_api::ScopedTimeout timeout(comm, options->timeout_seconds);
    SDRT_ASSIGN_OR_RETURN(sdrt::ReshardPlan plan,
                          sdrt::PlanReshard(source->map, destination->map, ro));
    auto handle = std::make_unique<sdrt_reshard_plan_s>();
    handle->plan = std::move(plan);
    handle->comm = comm;
    *out = handle.release();
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_execute(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                   sdrt_state_dict_t destination,
                                   const sdrt_reshard_execute_options_t* options) {
  return Guard("sdrt_reshard_execute", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::NotNull(plan, "plan"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(source, "source"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(destination, "destination"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_reshard_execute_options_t o =
        options != nullptr ? *options
                           : sdrt_reshard_execute_options_t SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
    SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, source->map));
    sdrt::Map work = destination->map;
    sdrt::ReshardStats stats;
    absl::Status status;
    {
      c_api::ScopedTimeout timeout(plan->comm, o.timeout_seconds);
      status = sdrt::ExecuteReshard(plan->plan, source->map, work, &stats);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    SDRT_RETURN_IF_ERROR(status);
    return c_api::WriteBack(destination->map, work);
  });
}

sdrt_status_t sdrt_reshard_bind(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                sdrt_state_dict_t destination,
                                const sdrt_reshard_execute_options_t* options,
                                sdrt_reshard_bound_t* out) {
  return Guard("sdrt_reshard_bind", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(plan, "plan"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(source, "source"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(destination, "destination"));
    SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const double timeout_seconds = options != nullptr ? options->timeout_seconds : 0.0;
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(timeout_seconds));
    sdrt::Map work = destination->map;
    absl::StatusOr<sdrt::BoundReshard> bound;
    {
      c_api::ScopedTimeout timeout(plan->comm, timeout_seconds);
      bound = sdrt::BindReshard(plan->plan, source->map, work);
    }
    SDRT_RETURN_IF_ERROR(bound.status());
    auto handle = std::make_unique<sdrt_reshard_bound_s>(
        sdrt_reshard_bound_s{*std::move(bound), plan->comm, source->map, {}});
    SDRT_ASSIGN_OR_RETURN(handle->write_back, c_api::WriteBackPairs(destination->map, work));
    *out = handle.release();
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_bound_execute(sdrt_reshard_bound_t bound,
                                         const sdrt_reshard_execute_options_t* options) {
  return Guard("sdrt_reshard_bound_execute", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_RETURN_IF_ERROR(c_api::NotNull(bound, "bound"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_reshard_execute_options_t o =
        options != nullptr ? *options
                           : sdrt_reshard_execute_options_t SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
    SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, bound->source));
    sdrt::ReshardStats stats;
    absl::Status status;
    {
      c_api::ScopedTimeout timeout(bound->comm, o.timeout_seconds);
      status = bound->bound.Execute(&stats);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    SDRT_RETURN_IF_ERROR(status);
    for (auto& [caller, result] : bound->write_back) SDRT_RETURN_IF_ERROR(caller.CopyFrom(result));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_bound_destroy(sdrt_reshard_bound_t bound) {
  return Guard("sdrt_reshard_bound_destroy", [&] {
    delete bound;
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_plan_destroy(sdrt_reshard_plan_t plan) {
  return Guard("sdrt_reshard_plan_destroy", [&] {
    delete plan;
    return absl::OkStatus();
  });
}

}  // extern "C"
