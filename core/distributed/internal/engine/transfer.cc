#include "sdrt/core/distributed/internal/engine/transfer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {

ExchangeCounts CountsOf(const TransferSchedule& schedule) {
  return {static_cast<int64_t>(schedule.direct_exchanges),
          static_cast<int64_t>(schedule.exchanges() - schedule.direct_exchanges)};
}

std::string EncodeExchangeCounts(const std::optional<ExchangeCounts>& counts) {
  std::string bytes;
  PutU64(&bytes, counts.has_value() ? static_cast<uint64_t>(counts->direct) : ~uint64_t{0});
  PutU64(&bytes, counts.has_value() ? static_cast<uint64_t>(counts->forward) : ~uint64_t{0});
  return bytes;
}

absl::StatusOr<ExchangeCounts> MostExchanges(absl::Span<const std::string> payloads) {
  ExchangeCounts most;
  for (size_t q = 0; q < payloads.size(); ++q) {
    ByteReader reader(payloads[q]);
    uint64_t direct = 0, forward = 0;
    if (!reader.Bounded(uint64_t{1} << 40, &direct) ||
        !reader.Bounded(uint64_t{1} << 40, &forward)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", q, " sent no exchange counts (it could not schedule its moves)"));
    }
    most.direct = std::max(most.direct, static_cast<int64_t>(direct));
    most.forward = std::max(most.forward, static_cast<int64_t>(forward));
  }
  return most;
}

void PadExchanges(ExchangeCounts mine, ExchangeCounts most, TransferProgram& program) {
  if (mine.direct >= most.direct && mine.forward >= most.forward) return;
  std::vector<TransferProgram::Exchange> padded;
  padded.reserve(program.exchanges.size() + (most.direct - mine.direct) +
                 (most.forward - mine.forward));
  // An empty exchange: empty ranges at the end of the ops and messages.
  TransferProgram::Exchange empty;
  empty.ops_begin = empty.ops_during = empty.ops_split = empty.ops_end = program.ops.size();
  empty.sends_begin = empty.sends_end = program.sends.size();
  empty.receives_begin = empty.receives_end = program.receives.size();
  size_t next = 0;
  for (const auto& [have, want] :
       {std::make_pair(mine.direct, most.direct), std::make_pair(mine.forward, most.forward)}) {
    for (int64_t e = 0; e < have; ++e) padded.push_back(program.exchanges[next++]);
    for (int64_t e = have; e < want; ++e) {
      padded.push_back(empty);
      ++program.stats.rounds;
    }
  }
  padded.insert(padded.end(), program.exchanges.begin() + static_cast<ptrdiff_t>(next),
                program.exchanges.end());
  program.exchanges = std::move(padded);
}

absl::Status CloseTransfer(Communicator& comm, absl::string_view op, const absl::Status& status,
                           int64_t* collectives, Tensor* flag) {
  // A communicator that timed out can take no more calls; its error is the verdict.
  if (status.code() == absl::StatusCode::kDeadlineExceeded) return status;
  Tensor made;
  if (flag == nullptr) {
    SDRT_ASSIGN_OR_RETURN(made, Tensor::Empty({1}, DType::kInt64, Device::CPU()));
    flag = &made;
  }
  Tensor& failed = *flag;
  *static_cast<int64_t*>(failed.data_ptr()) = status.ok() ? 0 : 1;
  if (collectives != nullptr) ++*collectives;
  // A broken communicator refuses at once: this rank's own error says more. But when this
  // rank's error is the backend's own (Internal: a send to a peer whose process has ended
  // fails at once) and the closing timed out, the ranks the closing names missing are the
  // likely cause: DeadlineExceeded with both.
  if (absl::Status closed = comm.AllReduce(failed, ReduceOp::kMax); !closed.ok()) {
    if (status.ok()) return closed;
    if (closed.code() != absl::StatusCode::kDeadlineExceeded ||
        status.code() != absl::StatusCode::kInternal) {
      return status;
    }
    return absl::DeadlineExceededError(
        absl::StrCat(closed.message(), "; before it, this rank: ", status.message()));
  }
  if (*static_cast<const int64_t*>(failed.data_ptr()) == 0) return absl::OkStatus();
  if (collectives != nullptr) ++*collectives;
  const absl::Status agreed = AgreeAcrossRanks(comm, op, "", {}, status);
  // Some rank failed; if the agreement found no message, say so rather than succeed.
  return agreed.ok() ? absl::InternalError(absl::StrCat(op, ": a rank failed and said nothing"))
                     : agreed;
}

absl::Status TransferRun::Prepare(Communicator& comm, const TransferRequest& request,
                                  TransferLocals sources, TransferLocals destinations,
                                  const TransferRunOptions& options) {
  comm_ = &comm;
  options_ = options;
  TransferPlanOptions plan_options;
  plan_options.world_size = comm.size();
  plan_options.node_of_rank = options.node_of_rank;
  plan_options.broadcast = true;
  plan_options.all_gather = !comm.device().is_cpu();
  SDRT_RETURN_IF_ERROR(Route(comm, request, std::move(plan_options)));
  return Compile(comm, std::move(sources), std::move(destinations));
}

absl::Status TransferRun::RouteLocal(const TransferSite& site, const TransferRequest& request) {
  comm_ = nullptr;
  site_ = site;
  return Route(site, request, {});
}

absl::Status TransferRun::PrepareLocal(TransferLocals sources, TransferLocals destinations) {
  if (!site_.has_value() || route_ == nullptr) {
    return absl::InternalError("TransferRun: PrepareLocal before RouteLocal");
  }
  return Compile(*site_, std::move(sources), std::move(destinations));
}

absl::Status TransferRun::Route(const TransferSite& site, const TransferRequest& request,
                                TransferPlanOptions plan_options) {
  plan_options.rank = site.rank();
  TransferScheduleOptions schedule_options;
  schedule_options.bucket_bytes = options_.bucket_bytes;
  schedule_options.chunk_alignment = site.device().is_cpu() ? 1 : kDeviceChunkAlignment;
  SDRT_ASSIGN_OR_RETURN(route_, RouteTransfer(request, plan_options, schedule_options));
  mine_ = most_ = CountsOf(route_->schedule);
  return absl::OkStatus();
}

absl::Status TransferRun::Compile(const TransferSite& site, TransferLocals sources,
                                  TransferLocals destinations) {
  sources_ = std::move(sources);
  destinations_ = std::move(destinations);
  SDRT_ASSIGN_OR_RETURN(program_, CompileTransfer(route_->plan, route_->schedule, mine_, site,
                                                  sources_, destinations_));
  return absl::OkStatus();
}

std::string TransferRun::payload() const {
  return EncodeExchangeCounts(program_.has_value() ? std::optional<ExchangeCounts>(mine_)
                                                   : std::nullopt);
}

absl::Status TransferRun::Agreed(absl::Span<const std::string> payloads) {
  SDRT_ASSIGN_OR_RETURN(most_, MostExchanges(payloads));
  if (!program_.has_value()) return absl::InternalError("TransferRun: agreed before prepared");
  PadExchanges(mine_, most_, *program_);
  return absl::OkStatus();
}

absl::Status TransferRun::Run(absl::string_view op, TransferStats* stats) {
  if (!program_.has_value()) return absl::InternalError("TransferRun: run before prepared");
  int64_t collectives = stats != nullptr ? stats->collectives : 0;
  absl::Status status = partial_.Run(&collectives);
  if (status.ok()) {
    status = RunTransfer(*program_, route_->plan, route_->schedule, comm_, sources_, destinations_,
                         options_.progress);
    collectives += static_cast<int64_t>(program_->exchanges.size());
  }
  // A call that moves nothing between ranks needs no closing: no rank waits on another.
  const bool moves = !program_->exchanges.empty() || !partial_.empty();
  if (moves && comm_ != nullptr) status = CloseTransfer(*comm_, op, status, &collectives);
  if (stats != nullptr) {
    SetPlanStats(route_->plan, route_->schedule, most_, *stats);
    stats->collectives = collectives;
    stats->sent_bytes = program_->stats.sent_bytes;
    stats->received_bytes = program_->stats.received_bytes;
    stats->buffer_bytes = program_->stats.buffer_bytes;
  }
  return status;
}

void SetPlanStats(const TransferPlan& plan, const TransferSchedule& schedule, ExchangeCounts most,
                  TransferStats& stats) {
  const TransferPlanStats& ps = plan.stats;
  stats.wire_bytes = ps.wire_bytes;
  stats.optimum_bytes = ps.optimum_bytes;
  stats.self_bytes = ps.self_bytes;
  stats.max_sent_bytes = ps.max_sent_bytes;
  stats.max_received_bytes = ps.max_received_bytes;
  stats.messages = ps.messages;
  stats.internode_bytes = ps.internode_bytes;
  stats.exchanges = most.direct + most.forward + static_cast<int64_t>(schedule.collectives.size());
  stats.cast_by_senders = stats.cast_by_receivers = 0;
  for (const TransferTensorPlan& tp : plan.tensors) {
    if (!tp.cast.has_value()) continue;
    // The wire carries `dtype`: the destination's when the senders convert.
    (tp.dtype == tp.cast->destination ? stats.cast_by_senders : stats.cast_by_receivers) += 1;
  }
}

}  // namespace sdrt::internal
