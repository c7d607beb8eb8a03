// What a ReshardPlan (reshard_state_dict.h) holds: the rank's plan and schedule, and the
// preparation of a call, shared by ExecuteReshard (reshard_state_dict.cc) and BindReshard
// (bound_reshard.cc). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_STATE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_STATE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/locals.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/transfer_stats.h"

namespace sdrt {

struct ReshardPlan::State {
  Communicator* comm = nullptr;
  internal::TransferPlan plan;
  internal::TransferSchedule schedule;
  internal::ExchangeCounts exchanges;  // the most of any rank's schedule
  std::vector<std::string> paths;
  std::vector<PlannedCast> casts;
  TransferStats stats;  // the plan's figures
  // The weight map's lowering (mapping/lowering.h); null without a map.
  std::shared_ptr<const internal::MapLowering> lowering;
  // ReshardOptions::progress, for every execution.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

namespace internal {

// What ExecuteReshard and BindReshard do before their agreement: this rank's locals of
// `source` and `destination` found and checked (FindTransferLocals, kept by handle when
// `keep`; a weight map's lowered leaves made first, and its FP8 sources' scales bound) and
// its program compiled (CompileTransfer) into `program`. Returns this rank's error, for the
// caller to agree on.
absl::Status PrepareReshard(const sdrt::ReshardPlan::State& s, const Map& source, Map& destination,
                            bool keep, FoundTransferLocals& found,
                            std::optional<TransferProgram>& program);

// Runs a compiled reshard and closes the call (transfer.h), filling `stats` when not null:
// the plan's figures, this rank's from `program`, and `collectives` made before it (the
// agreement) plus the exchanges and the closing. FP8 leaves (mapping/quantize.h): their
// scales all-reduced before the exchanges, written after them. `close_flag`: CloseTransfer's
// (transfer.h; a bound reshard's own), or null.
absl::Status RunCompiledReshard(absl::string_view op, const sdrt::ReshardPlan::State& s,
                        const TransferProgram& program, FoundTransferLocals& locals,
                        int64_t collectives, TransferStats* stats, Tensor* close_flag = nullptr);

}  // namespace internal

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PLAN_STATE_H_
