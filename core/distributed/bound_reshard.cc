// BindReshard / BoundReshard (core/distributed/reshard_state_dict.h): the rank's locals
// found and kept once (internal/reshard_locals.h), its schedule compiled against them
// (internal/reshard_program.h), and the program run every step.
#include <memory>
#include <utility>

#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/reshard_locals.h"
#include "sdrt/core/distributed/internal/reshard_plan_state.h"
#include "sdrt/core/distributed/internal/reshard_program.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

struct BoundReshard::State {
  ReshardPlan plan;
  const ReshardPlan::State* plan_state = nullptr;  // plan's
  // The kept locals (their refs point into their `owned`); the program points into them,
  // into the plan's schedule and into the locals' memory.
  internal::FoundReshardLocals locals;
  internal::ReshardProgram program;
};

BoundReshard::BoundReshard(std::unique_ptr<State> state) : state_(std::move(state)) {}
BoundReshard::BoundReshard(BoundReshard&&) noexcept = default;
BoundReshard& BoundReshard::operator=(BoundReshard&&) noexcept = default;
BoundReshard::~BoundReshard() = default;

const ReshardPlan& BoundReshard::plan() const { return state_->plan; }

absl::Status BoundReshard::Execute(ReshardStats* stats) {
  if (state_ == nullptr) {
    return absl::FailedPreconditionError("BoundReshard::Execute: a moved-from binding");
  }
  const ReshardPlan::State& s = *state_->plan_state;
  const internal::ReshardProgram& program = state_->program;
  const absl::Status status = internal::RunReshard(
      program, s.plan, s.schedule, *s.comm, state_->locals.sources, state_->locals.destinations);
  if (status.ok() && stats != nullptr) {
    *stats = s.stats;
    stats->sent_bytes = program.stats.sent_bytes;
    stats->received_bytes = program.stats.received_bytes;
    stats->buffer_bytes = program.stats.buffer_bytes;
    stats->collectives = program.stats.rounds;
  }
  return status;
}

absl::StatusOr<BoundReshard> BindReshard(const ReshardPlan& plan, const Map& source,
                                         Map& destination) {
  if (plan.state_ == nullptr) return absl::FailedPreconditionError("BindReshard: empty plan");
  const ReshardPlan::State& s = *plan.state_;
  Communicator& comm = *s.comm;
  auto state = std::make_unique<BoundReshard::State>();
  state->plan = plan;
  state->plan_state = &s;
  absl::Status local_error =
      internal::FindReshardLocals(s.plan, comm.rank(), comm.device(), source, destination,
                                  /*keep=*/true, state->locals);
  if (local_error.ok()) {
    absl::StatusOr<internal::ReshardProgram> program = internal::CompileReshard(
        s.plan, s.schedule, s.exchanges, comm, state->locals.sources, state->locals.destinations);
    if (program.ok()) {
      state->program = *std::move(program);
    } else {
      local_error = program.status();
    }
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, "BindReshard", "", {}, local_error));
  SDRT_RETURN_IF_ERROR(internal::InstallFreshLocals(state->locals));
  // The destination tree's leaves are not needed again (and may go with the tree).
  state->locals.destination_leaves = {};
  return BoundReshard(std::move(state));
}

}  // namespace sdrt
