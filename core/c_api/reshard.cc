// sdrt/c_api.h: reshard plans (PlanReshard once, ExecuteReshard every step) and plans bound
// to one pair of state dicts' buffers (BindReshard once, BoundReshard::Execute every step).
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/c_api/c_api.h"
#include "sdrt/core/c_api/internal/errors.h"
#include "sdrt/core/c_api/internal/handles.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::c_api {

// What an sdrt_reshard_plan_t stands for: the plan, and the handle of the communicator it
// was made over (checked live at every use).
struct ReshardPlanObject {
  ReshardPlan plan;
  sdrt_comm_t comm = nullptr;
};
// What an sdrt_reshard_bound_t stands for: a bound plan and what each step adds to it: the
// entries whose result is not written in the caller's buffer (a plain destination tensor,
// which the library replaces by a new full one), copied there after every step, and the
// source, whose CUDA buffers the execute options' stream is waited for on.
struct ReshardBoundObject {
  BoundReshard bound;
  sdrt_comm_t comm = nullptr;
  Map source;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (caller's, result)
};

namespace {

// The communicator of a plan or binding: FailedPrecondition once the program destroyed it.
absl::StatusOr<Communicator*> PlanComm(sdrt_comm_t comm) {
  absl::StatusOr<Communicator*> c = CommOf(comm, true, "the plan's communicator");
  if (c.ok()) return c;
  return absl::FailedPreconditionError(absl::StrCat(
      c.status().message(), " (destroy plans and bindings before their communicator)"));
}

}  // namespace
}  // namespace sdrt::c_api

using sdrt::c_api::Guard;
namespace c_api = sdrt::c_api;

extern "C" {

sdrt_status_t sdrt_reshard_plan_create(sdrt_state_dict_t source, sdrt_state_dict_t destination,
                                       const sdrt_reshard_options_t* options,
                                       sdrt_reshard_plan_t* out) {
  return Guard("sdrt_reshard_plan_create", [&]() -> absl::Status {
    SDRT_RETURN_IF_ERROR(c_api::NotNull(options, "options (comm is required)"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm,
                          c_api::CommOf(options->comm, true, "options.comm"));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* src = nullptr;
    c_api::StateDictObject* dst = nullptr;
    sdrt::ReshardOptions ro;
    ro.comm = comm;
    ro.bucket_bytes = options->bucket_bytes;
    SDRT_RETURN_IF_ERROR(c_api::RefusedOnEveryRank(
        comm, options->timeout_seconds, "PlanReshard", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(src, c_api::Resolve(source, "source"));
          SDRT_ASSIGN_OR_RETURN(dst, c_api::Resolve(destination, "destination"));
          SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
          SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(options->timeout_seconds));
          // A copy of the map: the plan keeps its lowering, not the handle.
          SDRT_ASSIGN_OR_RETURN(ro.weight_map,
                                c_api::WeightMapOf(options->weight_map, "options.weight_map"));
          return absl::OkStatus();
        }()));
    c_api::ScopedTimeout timeout(comm, options->timeout_seconds);
    SDRT_ASSIGN_OR_RETURN(sdrt::ReshardPlan plan, sdrt::PlanReshard(src->map, dst->map, ro));
    auto object = std::make_unique<c_api::ReshardPlanObject>();
    object->plan = std::move(plan);
    object->comm = options->comm;
    *out = c_api::NewHandle<sdrt_reshard_plan_t>(std::move(object));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_execute(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                   sdrt_state_dict_t destination,
                                   const sdrt_reshard_execute_options_t* options) {
  return Guard("sdrt_reshard_execute", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_ASSIGN_OR_RETURN(c_api::ReshardPlanObject * p, c_api::Resolve(plan, "plan"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_reshard_execute_options_t o =
        options != nullptr ? *options
                           : sdrt_reshard_execute_options_t SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::PlanComm(p->comm));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* src = nullptr;
    c_api::StateDictObject* dst = nullptr;
    SDRT_RETURN_IF_ERROR(
        c_api::RefusedOnEveryRank(comm, o.timeout_seconds, "ExecuteReshard", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(src, c_api::Resolve(source, "source"));
          SDRT_ASSIGN_OR_RETURN(dst, c_api::Resolve(destination, "destination"));
          SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
          return c_api::WaitForStream(o.stream, src->map);
        }()));
    sdrt::Map work = dst->map;
    sdrt::TransferStats stats;
    absl::Status status;
    {
      c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
      status = sdrt::ExecuteReshard(p->plan, src->map, work, &stats);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    SDRT_RETURN_IF_ERROR(status);
    return c_api::WriteBack(dst->map, work);
  });
}

sdrt_status_t sdrt_reshard_bind(sdrt_reshard_plan_t plan, sdrt_state_dict_t source,
                                sdrt_state_dict_t destination,
                                const sdrt_reshard_execute_options_t* options,
                                sdrt_reshard_bound_t* out) {
  return Guard("sdrt_reshard_bind", [&]() -> absl::Status {
    SDRT_ASSIGN_OR_RETURN(c_api::ReshardPlanObject * p, c_api::Resolve(plan, "plan"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const double timeout_seconds = options != nullptr ? options->timeout_seconds : 0.0;
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::PlanComm(p->comm));
    // The communicator found, what this rank refuses every rank returns.
    c_api::StateDictObject* src = nullptr;
    c_api::StateDictObject* dst = nullptr;
    SDRT_RETURN_IF_ERROR(
        c_api::RefusedOnEveryRank(comm, timeout_seconds, "BindReshard", [&]() -> absl::Status {
          SDRT_ASSIGN_OR_RETURN(src, c_api::Resolve(source, "source"));
          SDRT_ASSIGN_OR_RETURN(dst, c_api::Resolve(destination, "destination"));
          SDRT_RETURN_IF_ERROR(c_api::NotNull(out, "out"));
          return c_api::ScopedTimeout::Check(timeout_seconds);
        }()));
    sdrt::Map work = dst->map;
    absl::StatusOr<sdrt::BoundReshard> bound;
    {
      c_api::ScopedTimeout timeout(comm, timeout_seconds);
      bound = sdrt::BindReshard(p->plan, src->map, work);
    }
    SDRT_RETURN_IF_ERROR(bound.status());
    auto object = std::make_unique<c_api::ReshardBoundObject>(
        c_api::ReshardBoundObject{*std::move(bound), p->comm, src->map, {}});
    SDRT_ASSIGN_OR_RETURN(object->write_back, c_api::WriteBackPairs(dst->map, work));
    *out = c_api::NewHandle<sdrt_reshard_bound_t>(std::move(object));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_bound_execute(sdrt_reshard_bound_t bound,
                                         const sdrt_reshard_execute_options_t* options) {
  return Guard("sdrt_reshard_bound_execute", [&]() -> absl::Status {
    c_api::StatsScope scope;
    SDRT_ASSIGN_OR_RETURN(c_api::ReshardBoundObject * b, c_api::Resolve(bound, "bound"));
    SDRT_RETURN_IF_ERROR(c_api::CheckStructSize(options, "options"));
    const sdrt_reshard_execute_options_t o =
        options != nullptr ? *options
                           : sdrt_reshard_execute_options_t SDRT_RESHARD_EXECUTE_OPTIONS_INIT;
    SDRT_RETURN_IF_ERROR(c_api::ScopedTimeout::Check(o.timeout_seconds));
    SDRT_ASSIGN_OR_RETURN(sdrt::Communicator * comm, c_api::PlanComm(b->comm));
    SDRT_RETURN_IF_ERROR(c_api::WaitForStream(o.stream, b->source));
    sdrt::TransferStats stats;
    absl::Status status;
    {
      c_api::ScopedTimeout timeout(comm, o.timeout_seconds);
      status = b->bound.Execute(&stats);
    }
    scope.stats().bytes_sent = stats.sent_bytes;
    scope.stats().bytes_received = stats.received_bytes;
    scope.stats().collectives = stats.collectives;
    SDRT_RETURN_IF_ERROR(status);
    for (auto& [caller, result] : b->write_back) SDRT_RETURN_IF_ERROR(caller.CopyFrom(result));
    return absl::OkStatus();
  });
}

sdrt_status_t sdrt_reshard_bound_destroy(sdrt_reshard_bound_t bound) {
  return Guard("sdrt_reshard_bound_destroy", [&] { return c_api::DestroyHandle(bound, "bound"); });
}

sdrt_status_t sdrt_reshard_plan_destroy(sdrt_reshard_plan_t plan) {
  return Guard("sdrt_reshard_plan_destroy", [&] { return c_api::DestroyHandle(plan, "plan"); });
}

}  // extern "C"
