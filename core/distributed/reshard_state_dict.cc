// PlanReshard / ExecuteReshard (core/distributed/reshard_state_dict.h): the leaves become
// descriptors (internal/engine/descriptors.h), exchanged inside the agreement; every rank
// plans its own messages alike (internal/engine/plan.h), and the executor moves its
// chunks in exchanges (internal/engine/schedule.h), as many on every rank.
#include "sdrt/core/distributed/reshard_state_dict.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdrt/core/distributed/agreement.h"
#include "sdrt/core/distributed/internal/byte_codec.h"
#include "sdrt/core/distributed/internal/engine/descriptors.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/core/distributed/internal/engine/locals.h"
#include "sdrt/core/distributed/internal/engine/plan.h"
#include "sdrt/core/distributed/internal/engine/plan_state.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/engine/transfer.h"
#include "sdrt/core/distributed/internal/mapping/compiled_map.h"
#include "sdrt/core/distributed/internal/mapping/lowering.h"
#include "sdrt/core/distributed/internal/node.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt {

namespace {

// What an empty plan's accessors read: no paths, zero figures, no casts.
const ReshardPlan::State& StateOrEmpty(const std::shared_ptr<const ReshardPlan::State>& state) {
  static const ReshardPlan::State* const kEmpty = new ReshardPlan::State();
  return state != nullptr ? *state : *kEmpty;
}

}  // namespace

const std::vector<std::string>& ReshardPlan::paths() const { return StateOrEmpty(state_).paths; }
const TransferStats& ReshardPlan::stats() const { return StateOrEmpty(state_).stats; }
const std::vector<PlannedCast>& ReshardPlan::casts() const { return StateOrEmpty(state_).casts; }

absl::StatusOr<ReshardPlan> PlanReshard(const Map& source, const Map& destination,
                                        const ReshardOptions& options) {
  if (options.comm == nullptr) {
    return absl::FailedPreconditionError("PlanReshard: no communicator (options.comm)");
  }
  Communicator& comm = *options.comm;
  std::vector<internal::LeafLayout> mine;
  absl::Status local_error = internal::DescribeStateDict(source, /*source=*/true, mine);
  if (local_error.ok()) local_error = internal::DescribeStateDict(destination, /*source=*/false, mine);
  if (local_error.ok() && options.bucket_bytes < 64) {
    local_error = absl::InvalidArgumentError(
        absl::StrCat("bucket_bytes ", options.bucket_bytes, " must be >= 64"));
  }
  auto state = std::make_shared<ReshardPlan::State>();
  state->comm = &comm;
  state->progress = options.progress;
  TransferStats collectives;
  if (local_error.ok() && !options.node_of_rank.empty() &&
      static_cast<int>(options.node_of_rank.size()) != comm.size()) {
    local_error = absl::InvalidArgumentError(absl::StrCat(
        "node_of_rank has ", options.node_of_rank.size(), " entries for ", comm.size(), " ranks"));
  }
  // Each rank's payload: its host name (for node_of_rank when not given), then its leaves.
  AgreementPayload payload;
  internal::PutString(&payload.mine, options.node_of_rank.empty() ? internal::HostName() : "");
  payload.mine += internal::EncodeLeafLayouts(mine);
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(
      comm, "PlanReshard",
      absl::StrCat("bucket_bytes ", options.bucket_bytes, " node_of_rank [",
                   absl::StrJoin(options.node_of_rank, ","), "] weight map ",
                   internal::WeightMapHash(options.weight_map)),
      {}, local_error, &collectives, &payload));
  std::vector<std::vector<internal::LeafLayout>> per_rank;
  internal::TransferPlanOptions plan_options;
  plan_options.rank = comm.rank();
  plan_options.node_of_rank = options.node_of_rank;
  // Tensors every rank needs whole move by a collective (internal/engine/transfer.h).
  plan_options.world_size = comm.size();
  plan_options.broadcast = true;
  plan_options.all_gather = !comm.device().is_cpu();
  absl::flat_hash_map<std::string, int64_t> hosts;
  for (int q = 0; q < static_cast<int>(payload.all.size()); ++q) {
    internal::ByteReader reader(payload.all[q]);
    std::string host;
    if (!reader.String(&host) || host.size() > internal::kMaxHostNameBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("PlanReshard: rank ", q, " sent a malformed host name"));
    }
    if (options.node_of_rank.empty()) {
      plan_options.node_of_rank.push_back(
          hosts.emplace(host, static_cast<int64_t>(hosts.size())).first->second);
    }
    SDRT_ASSIGN_OR_RETURN(
        std::vector<internal::LeafLayout> leaves,
        internal::DecodeLeafLayouts(
            payload.all[q].substr(payload.all[q].size() - reader.Remaining()), q));
    per_rank.push_back(std::move(leaves));
  }
  // A map, or FP8 destinations with scales (quantize.h), which the lowering makes too.
  if (options.weight_map.compiled() != nullptr || internal::HasCodeLeaves(per_rank)) {
    SDRT_ASSIGN_OR_RETURN(internal::MapLowering lowering,
                          internal::LowerLeafLayouts(internal::CompiledOrEmpty(options.weight_map),
                                                     per_rank, /*quantize_on_senders=*/true));
    if (!lowering.empty()) {
      state->lowering = std::make_shared<const internal::MapLowering>(std::move(lowering));
    }
  }
  SDRT_ASSIGN_OR_RETURN(std::vector<internal::TransferTensor> tensors,
                        internal::MergeLeafLayouts(per_rank));
  for (const internal::TransferTensor& t : tensors) state->paths.push_back(t.name);
  SDRT_ASSIGN_OR_RETURN(state->plan, internal::PlanTransfer(std::move(tensors), plan_options));
  for (const internal::TransferTensorPlan& tp : state->plan.tensors) {
    if (!tp.cast.has_value()) continue;
    // The wire carries `dtype`: the destination's when the senders convert.
    state->casts.push_back({tp.name, tp.cast->source, tp.cast->destination,
                            tp.dtype == tp.cast->destination});
  }
  internal::TransferScheduleOptions execute;
  execute.bucket_bytes = options.bucket_bytes;
  execute.chunk_alignment = comm.device().is_cpu() ? 1 : internal::kDeviceChunkAlignment;
  // Every rank makes as many exchanges as the busiest in each phase: one more exchange of
  // 16 bytes, which also carries a rank's failure to schedule so that no rank is left
  // waiting.
  absl::StatusOr<internal::TransferSchedule> schedule =
      internal::ScheduleTransfer(state->plan, comm.rank(), execute);
  SDRT_ASSIGN_OR_RETURN(
      const std::vector<std::string> counts,
      comm.AllGatherBytes(internal::EncodeExchangeCounts(
          schedule.ok() ? std::optional<internal::ExchangeCounts>(internal::CountsOf(*schedule))
                        : std::nullopt)));
  ++collectives.collectives;
  if (!schedule.ok()) return schedule.status();
  state->schedule = *std::move(schedule);
  SDRT_ASSIGN_OR_RETURN(state->exchanges, internal::MostExchanges(counts));
  internal::SetPlanStats(state->plan, state->schedule, state->exchanges, state->stats);
  state->stats.collectives = collectives.collectives;
  ReshardPlan plan;
  plan.state_ = std::move(state);
  return plan;
}

absl::Status ExecuteReshard(const ReshardPlan& plan, const Map& source, Map& destination,
                            TransferStats* stats) {
  if (plan.state_ == nullptr) return absl::FailedPreconditionError("ExecuteReshard: empty plan");
  const ReshardPlan::State& s = *plan.state_;
  Communicator& comm = *s.comm;
  internal::FoundTransferLocals found;
  std::optional<internal::TransferProgram> program;
  const absl::Status local_error =
      internal::PrepareReshard(s, source, destination, /*keep=*/false, found, program);
  SDRT_RETURN_IF_ERROR(AgreeAcrossRanks(comm, "ExecuteReshard", "", {}, local_error));
  SDRT_RETURN_IF_ERROR(
      internal::RunCompiledReshard("ExecuteReshard", s, *program, found, /*collectives=*/1, stats));
  return internal::InstallFreshLocals(found);
}

namespace internal {

// This rank's source locals of a quantized source with their global offsets (a piece of
// one run per dim; InvalidArgument for a _StridedShard one).
SourceLocals SourceLocalsOf(const sdrt::ReshardPlan::State& s, const FoundTransferLocals& found) {
  return [&s, &found](const QuantizedSource& src)
             -> absl::StatusOr<std::vector<std::pair<Tensor, IntVector>>> {
    std::vector<std::pair<Tensor, IntVector>> out;
    if (src.tensor < 0) return out;
    const size_t t = static_cast<size_t>(src.tensor);
    const LocalRefs locals = found.sources.of(t);
    for (const TransferPiece& piece : s.plan.tensors[t].source()) {
      if (piece.rank != s.comm->rank()) continue;
      IntVector offsets;
      for (const IndexRuns& runs : piece.runs) {
        if (runs.size() != 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "FP8: '", src.name, "' is quantized from a _StridedShard source, which is not built"));
        }
        offsets.push_back(runs[0].global - runs[0].local);
      }
      if (piece.local < static_cast<int>(locals.size()) && locals[piece.local].tensor != nullptr) {
        out.emplace_back(*locals[piece.local].tensor, std::move(offsets));
      }
    }
    return out;
  };
}

// Finds each quantized source's plan tensor and points its source locals' scales at its
// grid (quantize.h), on the communicator's device.
absl::Status BindSenderScales(const sdrt::ReshardPlan::State& s, FoundTransferLocals& found) {
  QuantizeWork& work = found.mapped.quantize;
  if (!work.on_senders || work.sources.empty()) return absl::OkStatus();
  const float* scales = work.scales.data();
  if (!s.comm->device().is_cpu()) {
    // Device buckets: the packing reads the scales on the device (SenderScales fills them).
    SDRT_ASSIGN_OR_RETURN(work.device_scales,
                          Tensor::Empty(IntVector{static_cast<int64_t>(work.scales.size())},
                                        DType::kFloat32, s.comm->device()));
    scales = work.device_scales.data<float>();
  }
  absl::flat_hash_map<absl::string_view, size_t> tensor_of;
  for (size_t t = 0; t < s.paths.size(); ++t) tensor_of.emplace(s.paths[t], t);
  found.sources.scales.assign(s.plan.tensors.size(), BoxScales{});
  for (QuantizedSource& src : work.sources) {
    const auto it = tensor_of.find(src.name);
    if (it == tensor_of.end()) continue;
    src.tensor = static_cast<int64_t>(it->second);
    BoxScales& b = found.sources.scales[it->second];
    b.scales = scales + src.offset;
    b.tile = work.specs[static_cast<size_t>(src.destination)].tile;
    b.grid_cols = src.grid_cols;
    b.grid_entries = b.tile == 0 ? 1 : src.grid_rows * src.grid_cols;
  }
  return absl::OkStatus();
}

absl::Status PrepareReshard(const sdrt::ReshardPlan::State& s, const Map& source, Map& destination,
                            bool keep, FoundTransferLocals& found,
                            std::optional<TransferProgram>& program) {
  Communicator& comm = *s.comm;
  if (s.lowering != nullptr) {
    SDRT_RETURN_IF_ERROR(
        LowerLocals(*s.lowering, comm.rank(), comm.device(), destination, found.mapped));
  }
  SDRT_RETURN_IF_ERROR(
      FindTransferLocals(s.plan, comm.rank(), comm.device(), source, destination, keep, found));
  SDRT_RETURN_IF_ERROR(BindSenderScales(s, found));
  // Compiled before the agreement, so that its errors (the buckets) are every rank's.
  SDRT_ASSIGN_OR_RETURN(program, CompileTransfer(s.plan, s.schedule, s.exchanges, comm,
                                                 found.sources, found.destinations));
  return absl::OkStatus();
}

absl::Status RunCompiledReshard(absl::string_view op, const sdrt::ReshardPlan::State& s,
                                const TransferProgram& program, FoundTransferLocals& locals,
                                int64_t collectives, TransferStats* stats, Tensor* close_flag) {
  Communicator& comm = *s.comm;
  QuantizeWork& quantize = locals.mapped.quantize;
  if (quantize.on_senders && !quantize.sources.empty()) {
    // FP8 codes on the wire: every tile's scale from every rank's amax, before packing.
    SDRT_RETURN_IF_ERROR(SenderScales(quantize, SourceLocalsOf(s, locals), comm));
    ++collectives;
  }
  absl::Status status = RunTransfer(program, s.plan, s.schedule, &comm, locals.sources,
                                    locals.destinations, s.progress);
  collectives += static_cast<int64_t>(program.exchanges.size());
  if (!program.exchanges.empty()) {
    status = CloseTransfer(comm, op, status, &collectives, close_flag);
  }
  if (status.ok() && quantize.any()) status = FinishQuantized(quantize, &comm);
  if (status.ok() && locals.mapped.dequantize.any()) {
    status = FinishDequantized(locals.mapped.dequantize);
  }
  if (status.ok() && stats != nullptr) {
    *stats = s.stats;
    stats->collectives = collectives;
    stats->sent_bytes = program.stats.sent_bytes;
    stats->received_bytes = program.stats.received_bytes;
    stats->buffer_bytes = program.stats.buffer_bytes;
  }
  return status;
}

}  // namespace internal

absl::Status ReshardStateDict(const Map& source, Map& destination, const ReshardOptions& options,
                              TransferStats* stats) {
  SDRT_ASSIGN_OR_RETURN(const ReshardPlan plan, PlanReshard(source, destination, options));
  SDRT_RETURN_IF_ERROR(ExecuteReshard(plan, source, destination, stats));
  if (stats != nullptr) stats->collectives += plan.stats().collectives;
  return absl::OkStatus();
}

}  // namespace sdrt
