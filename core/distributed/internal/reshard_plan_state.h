// What a ReshardPlan (reshard_state_dict.h) holds: the rank's plan and schedule, shared by
// ExecuteReshard (reshard_state_dict.cc) and BindReshard (bound_reshard.cc). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_

#include <string>
#include <vector>

#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/reshard_execute.h"
#include "sdrt/core/distributed/internal/reshard_plan.h"
#include "sdrt/core/distributed/reshard_state_dict.h"

namespace sdrt {

struct ReshardPlan::State {
  Communicator* comm = nullptr;
  internal::ReshardPlan plan;
  internal::ReshardSchedule schedule;
  internal::ReshardExchangeCounts exchanges;  // the most of any rank's schedule
  std::vector<std::string> paths;
  ReshardStats stats;
};

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_
