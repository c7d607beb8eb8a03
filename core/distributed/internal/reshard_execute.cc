#include "sdrt/core/distributed/internal/reshard_execute.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_pack.h"
#include "sdrt/core/distributed/internal/reshard_program.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr int64_t kMinBucketBytes = 64;
constexpr size_t kMaxChunks = size_t{1} << 24;

// Appends the pieces of `move` of at most `bucket` bytes each (see ScheduleReshard) to
// `out`; `bits` is the dtype's element width.
absl::Status SplitMove(const ReshardMove& move, DType dtype, int64_t bucket,
                       std::vector<ReshardMove>& out) {
  const size_t n = move.begin.size();
  size_t d = 0;
  while (d < n && move.end[d] - move.begin[d] <= 1) ++d;
  if (move.bytes <= bucket || d == n) {
    out.push_back(move);
    return out.size() <= kMaxChunks ? absl::OkStatus()
                                    : absl::InvalidArgumentError("more than 2^24 reshard chunks");
  }
  int64_t row_elements = 1;
  for (size_t e = d + 1; e < n; ++e) row_elements *= move.end[e] - move.begin[e];
  const int64_t extent = move.end[d] - move.begin[d];
  // Rows per piece: as many as fit, in steps that keep a sub-byte piece whole bytes.
  const int64_t bits = ElementBits(dtype);
  int64_t step = 1;
  while ((step * row_elements * bits) % 8 != 0) ++step;  // at most 8
  SDRT_ASSIGN_OR_RETURN(const int64_t row_bytes, BytesForElements(dtype, step * row_elements));
  int64_t rows = std::max<int64_t>(step, bucket / row_bytes * step);
  if (row_bytes > bucket && d + 1 < n && step == 1) {
    rows = 1;  // one row is too large: cut each row along the next dims
  }
  for (int64_t at = 0; at < extent; at += rows) {
    ReshardMove piece = move;
    piece.begin[d] = move.begin[d] + at;
    piece.end[d] = move.begin[d] + std::min(extent, at + rows);
    int64_t numel = 1;
    for (size_t e = 0; e < n; ++e) numel *= piece.end[e] - piece.begin[e];
    SDRT_ASSIGN_OR_RETURN(piece.bytes, BytesForElements(dtype, numel));
    if (rows == 1 && piece.bytes > bucket) {
      SDRT_RETURN_IF_ERROR(SplitMove(piece, dtype, bucket, out));
    } else {
      out.push_back(std::move(piece));
      if (out.size() > kMaxChunks)
        return absl::InvalidArgumentError("more than 2^24 reshard chunks");
    }
  }
  return absl::OkStatus();
}

// Appends the units of one phase's chunks `steps` (in plan order) to `schedule`: a wire
// chunk of contribution 0 under kDirectRangeBytes joins the open unit of its (sender,
// receiver) pair while that stays within `bucket` bytes, else opens the pair's next unit
// at its own place; a chunk to itself, a later Partial contribution and a large chunk
// (which may go on the wire from its local, DirectRange) are units of their own. Joining only moves
// a contribution-0 chunk earlier, which its destination allows: those chunks write disjoint
// elements, and a later contribution, reduced into them, comes after them in plan order.
void AppendUnits(absl::Span<const ReshardSchedule::Step> steps, int64_t bucket,
                 ReshardSchedule& schedule) {
  struct Open {
    std::vector<ReshardSchedule::Step> members;
    int64_t bytes = 0;
    int64_t source_rank = 0;
    int64_t destination_rank = 0;
  };
  std::vector<Open> units;
  absl::flat_hash_map<std::pair<int64_t, int64_t>, size_t> open;  // pair -> unit
  for (const ReshardSchedule::Step& step : steps) {
    const ReshardMessage& c = *step.chunk;
    if (c.source_rank != c.destination_rank && c.contribution == 0 && c.bytes < kDirectRangeBytes) {
      const auto [it, fresh] =
          open.try_emplace(std::make_pair(c.source_rank, c.destination_rank), units.size());
      if (!fresh && units[it->second].bytes + c.bytes <= bucket) {
        units[it->second].members.push_back(step);
        units[it->second].bytes += c.bytes;
        continue;
      }
      it->second = units.size();
    }
    units.push_back({{step}, c.bytes, c.source_rank, c.destination_rank});
  }
  for (Open& u : units) {
    schedule.units.push_back(
        {schedule.steps.size(), u.members.size(), u.bytes, u.source_rank, u.destination_rank});
    schedule.steps.insert(schedule.steps.end(), u.members.begin(), u.members.end());
  }
}

}  // namespace

absl::StatusOr<ReshardSchedule> ScheduleReshard(const ReshardPlan& plan, int64_t rank,
                                                const ReshardExecuteOptions& options) {
  const int64_t bucket = options.bucket_bytes;
  if (bucket < kMinBucketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard bucket_bytes ", bucket, " must be >= ", kMinBucketBytes));
  }
  if (rank < 0 || (plan.rank >= 0 && plan.rank != rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScheduleReshard: rank ", rank, " of a plan of rank ", plan.rank));
  }
  ReshardSchedule schedule;
  schedule.rank = rank;
  absl::flat_hash_map<const ReshardLayoutPlan*, std::shared_ptr<const std::vector<ReshardMessage>>>
      cut;
  size_t total = 0;
  std::vector<ReshardSchedule::Step> forwards;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const ReshardTensorPlan& tp = plan.tensors[t];
    auto [it, fresh] = cut.try_emplace(tp.layout.get());
    if (fresh) {
      auto chunks = std::make_shared<std::vector<ReshardMessage>>();
      for (const ReshardMessage& message : tp.messages()) {
        if (message.source_rank != rank && message.destination_rank != rank) continue;
        std::vector<ReshardMove> moves;
        for (const ReshardMove& move : message.moves) {
          SDRT_RETURN_IF_ERROR(SplitMove(move, tp.dtype, bucket, moves));
        }
        // Where each box lies in contiguous locals, for the host copies of every call.
        const std::vector<ReshardPiece>& senders = message.forward ? tp.destination() : tp.source();
        for (ReshardMove& move :
             IsSubByte(tp.dtype) ? absl::Span<ReshardMove>() : absl::MakeSpan(moves)) {
          if (move.source >= 0 && move.source < static_cast<int>(senders.size())) {
            move.source_offset = ContiguousBoxOffset(senders[move.source], move);
          }
          if (move.destination >= 0 &&
              move.destination < static_cast<int>(tp.destination().size())) {
            move.destination_offset = ContiguousBoxOffset(tp.destination()[move.destination], move);
          }
        }
        // Consecutive moves share a chunk while it stays within the bucket.
        bool first = true;
        for (ReshardMove& move : moves) {
          if (first || chunks->back().bytes + move.bytes > bucket) {
            chunks->push_back({message.source_rank,
                               message.destination_rank,
                               message.contribution,
                               {},
                               0,
                               message.forward});
            first = false;
          }
          chunks->back().bytes += move.bytes;
          chunks->back().moves.push_back(std::move(move));
        }
        if (chunks->size() > kMaxChunks) {
          return absl::InvalidArgumentError("more than 2^24 reshard chunks");
        }
      }
      it->second = std::move(chunks);
    }
    total += it->second->size();
    if (total > kMaxChunks) return absl::InvalidArgumentError("more than 2^24 reshard chunks");
    schedule.chunks.push_back(it->second);
    for (const ReshardMessage& chunk : *it->second) {
      (chunk.forward ? forwards : schedule.steps).push_back({t, &chunk});
    }
  }
  const std::vector<ReshardSchedule::Step> direct = std::move(schedule.steps);
  schedule.steps.clear();
  AppendUnits(direct, bucket, schedule);
  const size_t direct_units = schedule.units.size();
  AppendUnits(forwards, bucket, schedule);
  // Exchanges: consecutive units of one phase while neither side passes a bucket (at
  // least one unit); units to itself do not count: they are copied local to local during
  // the exchange or go through the send bucket after it (reshard_program.h).
  size_t i = 0;
  while (i < schedule.units.size()) {
    if (i == direct_units) schedule.direct_exchanges = schedule.begin.size();
    schedule.begin.push_back(i);
    const size_t phase_end = i < direct_units ? direct_units : schedule.units.size();
    int64_t sent = 0, received = 0;
    for (; i < phase_end; ++i) {
      const ReshardSchedule::Unit& u = schedule.units[i];
      if (u.source_rank == rank && u.destination_rank == rank) {
        schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, u.bytes);
        continue;
      }
      int64_t& side = u.source_rank == rank ? sent : received;
      if (side > 0 && side + u.bytes > bucket) break;
      side += u.bytes;
    }
    schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, sent);
    schedule.receive_bucket_bytes = std::max(schedule.receive_bucket_bytes, received);
  }
  if (direct_units == schedule.units.size()) schedule.direct_exchanges = schedule.begin.size();
  if (!schedule.begin.empty()) schedule.begin.push_back(i);
  return schedule;
}

absl::Status ExecuteReshard(const ReshardPlan& plan, const ReshardSchedule& schedule,
                            ReshardExchangeCounts exchanges, Communicator& comm,
                            ReshardLocals& sources, ReshardLocals& destinations,
                            ReshardExecuteStats* stats) {
  if (stats != nullptr) *stats = ReshardExecuteStats{};
  SDRT_ASSIGN_OR_RETURN(const ReshardProgram program,
                        CompileReshard(plan, schedule, exchanges, comm, sources, destinations));
  SDRT_RETURN_IF_ERROR(RunReshard(program, plan, schedule, comm, sources, destinations));
  if (stats != nullptr) *stats = program.stats;
  return absl::OkStatus();
}

}  // namespace sdrt::internal
