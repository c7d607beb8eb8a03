// What a ReshardPlan (reshard_state_dict.h) holds: the rank's plan and schedule, and the
// preparation of a call, shared by ExecuteReshard (reshard_state_dict.cc) and BindReshard
// (bound_reshard.cc). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/reshard_execute.h"
#include "sdrt/core/distributed/internal/reshard_locals.h"
#include "sdrt/core/distributed/internal/reshard_plan.h"
#include "sdrt/core/distributed/internal/reshard_program.h"
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

namespace internal {

// What ExecuteReshard and BindReshard do before their agreement: this rank's locals of
// `source` and `destination` found and checked (FindReshardLocals, kept by handle when
// `keep`) and its program compiled (CompileReshard) into `program`. Returns this rank's
// error, for the caller to agree on.
absl::Status PrepareReshard(const sdrt::ReshardPlan::State& s, const Map& source, Map& destination,
                            bool keep, FoundReshardLocals& found,
                            std::optional<ReshardProgram>& program);

// The plan's figures with this rank's from a run of `program` (collectives: its exchanges).
inline sdrt::ReshardStats StatsOfRun(const sdrt::ReshardPlan::State& s,
                                     const ReshardProgram& program) {
  sdrt::ReshardStats st = s.stats;
  st.sent_bytes = program.stats.sent_bytes;
  st.received_bytes = program.stats.received_bytes;
  st.buffer_bytes = program.stats.buffer_bytes;
  st.collectives = program.stats.rounds;
  return st;
}

}  // namespace internal

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_RESHARD_PLAN_STATE_H_
