// A route (a plan and this rank's schedule of it) and the cache of the last few routes
// made. Every call of the engine plans and schedules its move from descriptors alone
// (plan.h, schedule.h): pure functions of the tensors' names, dtypes, shapes and layouts,
// the rank, the world size and the bucket size. A program that moves one layout again (a
// trainer exporting its weights every step, an engine receiving every weight update, a
// benchmark's iterations) asks for the same route; the cache hands back the one made
// before instead of planning again, as PyTorch keeps the transform plans of
// DTensor.redistribute (_gen_transform_infos) once made. The buffers and the locals are
// not part of a route: each call compiles its own program (program.h) against them.
//
// The key is a 128-bit XXH3 hash of everything a route depends on (each mesh by its
// shape and ranks), so two requests with the same key get the same route. The cache keeps
// kMaxCachedRoutes routes and at most kMaxCachedTensors tensors in all (a larger route is
// made and not kept), the least recently used dropped first; it is shared by every
// thread and communicator (a route names no communicator). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"

namespace sdrt::internal {

inline constexpr int kMaxCachedRoutes = 8;
inline constexpr int64_t kMaxCachedTensors = int64_t{1} << 20;

struct TransferRoute {
  TransferPlan plan;
  TransferSchedule schedule;
};

// The route of `tensors` for rank `plan_options.rank` (>= 0): PlanTransfer then
// ScheduleTransfer, or the cached route of an equal request. Their errors (not cached).
absl::StatusOr<std::shared_ptr<const TransferRoute>> RouteTransfer(
    std::vector<TransferTensor> tensors, const TransferPlanOptions& plan_options,
    const TransferScheduleOptions& schedule_options);

// How many requests the cache answered and how many it planned, since the process started
// (for tests).
struct RouteCacheCounts {
  int64_t hits = 0;
  int64_t misses = 0;
};
RouteCacheCounts RouteCacheCountsNow();

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_ROUTE_CACHE_H_
