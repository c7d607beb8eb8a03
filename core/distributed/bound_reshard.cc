// BindReshard / BoundReshard (core/distributed/reshard_state_dict.h): the rank's locals
// found and kept once (internal/engine/locals.h), its schedule compiled against them
// (internal/engine/program.h), and the program run every step.
#include <memory>
#include <optional>
#include <utility>

#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/engine/plan_state.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt {

struct BoundReshard::State {
  ReshardPlan plan;
  // The kept locals (their refs point into their `owned`); the program points into them,
  // into the plan's schedule and into the locals' memory.
  internal::FoundTransferLocals locals;
  std::optional<internal::TransferProgram> program;
  Tensor close_flag;  // the closing's all-reduce (internal::CloseTransfer), kept for every step
};

BoundReshard::BoundReshard(std::unique_ptr<State> state) : state_(std::move(state)) {}
BoundReshard::BoundReshard(BoundReshard&&) noexcept = default;
BoundReshard& BoundReshard::operator=(BoundReshard&&) noexcept = default;
BoundReshard::~BoundReshard() = default;

const ReshardPlan& BoundReshard::plan() const { return state_->plan; }

absl::Status BoundReshard::Execute(TransferStats* stats) {
  if (state_ == nullptr) {
    return absl::FailedPreconditionError("BoundReshard::Execute: a moved-from binding");
  }
  return internal::RunCompiledReshard("BoundReshard::Execute", *state_->plan.state_,
                                      *state_->program, state_->locals, /*collectives=*/0, stats,
                                      &state_->close_flag);
}

absl::StatusOr<BoundReshard> BindReshard(const ReshardPlan& plan, const Map& source,
                                         Map& destination) {
  if (plan.state_ == nullptr) return absl::FailedPreconditionError("BindReshard: empty plan");
  const ReshardPlan::State& s = *plan.state_;
  auto state = std::make_unique<BoundReshard::State>();
  state->plan = plan;
  absl::Status local_error = internal::PrepareReshard(s, source, destination, /*keep=*/true,
                                                      state->locals, state->program);
  if (local_error.ok()) {
    absl::StatusOr<Tensor> flag = Tensor::Empty({1}, DType::kInt64, Device::CPU());
    local_error = flag.status();
    if (flag.ok()) state->close_flag = *std::move(flag);
  }
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(*s.comm, "BindReshard", "", {}, local_error));
  SDRT_RETURN_IF_ERROR(internal::InstallFreshLocals(state->locals));
  // The destination tree's leaves are not needed again (and may go with the tree).
  state->locals.destination_leaves = {};
  return BoundReshard(std::move(state));
}

}  // namespace sdrt
