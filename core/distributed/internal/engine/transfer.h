// One call of the transfer engine, as every distributed verb makes it: GatherStateDict,
// FullTensor, GatherShardedTensor, BroadcastStateDict, DistributeStateDict, ExecuteReshard,
// BoundReshard::Execute and the load of a sharded folder each describe what moves (the
// tensors' source and destination layouts, plan.h, and this rank's locals of each side)
// and leave the rest here:
//
//   1. Prepare (no communication): an optional all-reduce stage for Partial sources
//      (partial_reduce.h), the plan of this rank's messages, its schedule (schedule.h) and
//      its program (program.h, which allocates the buckets and checks every local). Its
//      errors are this rank's, for the verb's agreement.
//   2. The verb's agreement (agreement.h) carries payload(): the rank's exchange counts, so
//      that after it every rank makes as many exchanges as the busiest (Agreed).
//   3. Run: the all-reduces, the program's exchanges (point to point, then the collective
//      ones), then the closing: one small all-reduce of every rank's status, so that a
//      call completes on every rank or fails on every rank. Without it a rank whose
//      messages to a stopped peer were small enough to be sent eagerly, or that exchanged
//      nothing with it, would report success for a step the peer never finished. With it no
//      rank starts a later call's exchanges before every rank has finished this one's, so a
//      late rank never takes another call's bytes.
//
// Which exchanges are collectives: where every rank needs every byte of a tensor, a
// broadcast from the one rank that holds it (MPI's and NCCL's trees and rings beat a root
// sending to each rank in turn); on a device communicator (NCCL) also an all-gather. On a
// CPU communicator an all-gather stays point to point: each piece then goes from where it is
// straight into place on every rank that keeps it, where pack + all-gather + unpack copies
// it three times (bench/RESULTS.md). Not public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_TRANSFER_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_TRANSFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/partial_reduce.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/engine/route_cache.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/transfer_stats.h"

namespace sdrt::internal {

// The exchange counts of a schedule, and their encoding in an agreement's payload.
ExchangeCounts CountsOf(const TransferSchedule& schedule);
std::string EncodeExchangeCounts(const std::optional<ExchangeCounts>& counts);
// The most exchanges of any rank from every rank's payload; InvalidArgument naming the
// rank for a malformed one, or one of a rank that could not schedule (then its own
// agreement has already failed every rank).
absl::StatusOr<ExchangeCounts> MostExchanges(absl::Span<const std::string> payloads);

// `program` (compiled for `mine`) with empty exchanges added at the end of each phase up to
// `most`, before the collective exchanges.
void PadExchanges(ExchangeCounts mine, ExchangeCounts most, TransferProgram& program);

// The closing of a call (see above): one all-reduce of the status codes; when some rank
// failed, an agreement on the messages (AgreeAcrossRanks: "<op>: rank R: ..."). A
// communicator that failed (DeadlineExceeded, FailedPrecondition of a broken one) returns
// `status` as it is. Counts its collectives in *collectives. `flag`, when not null, is the
// one-element int64 CPU tensor the status codes are all-reduced in (a bound reshard keeps
// one, so that its steps allocate nothing); else one is made.
absl::Status CloseTransfer(Communicator& comm, absl::string_view op, const absl::Status& status,
                           int64_t* collectives, Tensor* flag = nullptr);

struct TransferRunOptions {
  int64_t bucket_bytes = int64_t{256} << 20;  // >= 64
  // The node of each rank for the fan-out (plan.h); empty: none.
  std::vector<int64_t> node_of_rank;
  // Called on the calling thread after each exchange with this rank's bytes sent and
  // received so far and in all. May be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

class TransferRun {
 public:
  // Step 1 (no communication). `request`: the tensors in the order every rank lists them
  // (route_cache.h; read during the call only); `sources`
  // and `destinations` this rank's locals of each (their tensors outlive the run); the
  // Partial sources to all-reduce first (partial().Prepare, before this) are those whose
  // reduced views `sources` may point at.
  absl::Status Prepare(Communicator& comm, const TransferRequest& request,
                       TransferLocals sources, TransferLocals destinations,
                       const TransferRunOptions& options);
  // The same for a call that moves nothing between ranks and has no communicator, in two
  // steps, so that the caller can make its destination locals from the plan (plan(): each
  // tensor's pieces, their local shapes for rank site.rank()) instead of working them out
  // again: RouteLocal plans, PrepareLocal compiles. Every destination piece of that rank
  // must be held by a source piece of it (else Run fails, there being no exchange to make).
  absl::Status RouteLocal(const TransferSite& site, const TransferRequest& request);
  absl::Status PrepareLocal(TransferLocals sources, TransferLocals destinations);
  PartialReduction& partial() { return partial_; }
  const PartialReduction& partial() const { return partial_; }

  // Step 2: what this rank's agreement carries, then every rank's of it.
  std::string payload() const;
  absl::Status Agreed(absl::Span<const std::string> payloads);

  // Step 3 (collective): runs and closes. `stats` (not null) gets the plan's figures and this
  // rank's, collectives added to what it holds (the verb's agreements).
  absl::Status Run(absl::string_view op, TransferStats* stats);

  // Only after a successful Prepare or RouteLocal.
  const TransferPlan& plan() const { return route_->plan; }
  bool prepared() const { return program_.has_value(); }

 private:
  // The route (plan and schedule) of `request` for site.rank(); then the program.
  absl::Status Route(const TransferSite& site, const TransferRequest& request,
                     TransferPlanOptions plan_options);
  absl::Status Compile(const TransferSite& site, TransferLocals sources,
                       TransferLocals destinations);

  Communicator* comm_ = nullptr;  // null: a local call (RouteLocal)
  std::optional<TransferSite> site_;  // a local call's, from RouteLocal
  TransferRunOptions options_;
  PartialReduction partial_;
  std::shared_ptr<const TransferRoute> route_;  // the plan and schedule (route_cache.h)
  TransferLocals sources_, destinations_;
  std::optional<TransferProgram> program_;
  ExchangeCounts mine_, most_;
};

// The plan's figures in `stats`, for a run whose busiest rank makes `most` point-to-point
// exchanges.
void SetPlanStats(const TransferPlan& plan, const TransferSchedule& schedule, ExchangeCounts most,
                  TransferStats& stats);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_TRANSFER_H_
