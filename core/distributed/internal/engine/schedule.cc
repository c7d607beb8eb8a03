#include "sdrt/core/distributed/internal/engine/schedule.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/schedule_units.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

constexpr int64_t kMinBucketBytes = 64;

// Where a chunk starts in a collective's bucket: on 16 bytes, as the device copies like
// (whatever the chunk alignment of the units).
int64_t AlignUp16(int64_t bytes) { return AlignUp(bytes, kDeviceChunkAlignment); }
// The most chunks of one rank's schedule: a chunk and its moves take about 500 bytes, so
// a schedule of 2^22 takes about 2 GB (and `sdrt simulate` makes one per thread at once).
// A real rank's is far below: 150,000 chunks for Kimi-K2 on 512 ranks.
constexpr size_t kMaxChunks = size_t{1} << 22;

// The error of a rank's schedule with more than kMaxChunks chunks.
absl::Status TooManyChunks(int64_t bucket) {
  return absl::InvalidArgumentError(
      absl::StrCat("more than 2^22 reshard chunks on one rank (its messages cut into chunks of at "
                   "most the bucket's ",
                   bucket, " bytes: a larger bucket makes fewer)"));
}

// Appends the pieces of `move` of at most `bucket` bytes each (see ScheduleTransfer) to
// `out`; `bits` is the dtype's element width.
absl::Status SplitMove(const TransferMove& move, DType dtype, int64_t bucket,
                       std::vector<TransferMove>& out) {
  const size_t n = move.begin.size();
  size_t d = 0;
  while (d < n && move.end[d] - move.begin[d] <= 1) ++d;
  if (move.bytes <= bucket || d == n) {
    out.push_back(move);
    return out.size() <= kMaxChunks ? absl::OkStatus() : TooManyChunks(bucket);
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
    TransferMove piece = move;
    piece.begin[d] = move.begin[d] + at;
    piece.end[d] = move.begin[d] + std::min(extent, at + rows);
    int64_t numel = 1;
    for (size_t e = 0; e < n; ++e) numel *= piece.end[e] - piece.begin[e];
    SDRT_ASSIGN_OR_RETURN(piece.bytes, BytesForElements(dtype, numel));
    if (rows == 1 && piece.bytes > bucket) {
      SDRT_RETURN_IF_ERROR(SplitMove(piece, dtype, bucket, out));
    } else {
      out.push_back(std::move(piece));
      if (out.size() > kMaxChunks) return TooManyChunks(bucket);
    }
  }
  return absl::OkStatus();
}

// Appends the collective exchanges of `steps` (every collective chunk of the plan, in plan
// order) to `schedule` (see TransferSchedule::CollectiveExchange).
absl::Status AppendCollectives(const TransferPlan& plan,
                               const std::vector<TransferSchedule::Step>& steps, int64_t bucket,
                               TransferSchedule& schedule) {
  if (steps.empty()) return absl::OkStatus();
  const int64_t world = plan.world_size;
  if (world < 2) return absl::InternalError("a collective plan without a world size");
  const int64_t rank = schedule.rank;
  using Exchange = TransferSchedule::CollectiveExchange;
  std::vector<Exchange>& out = schedule.collectives;
  size_t i = 0;
  while (i < steps.size()) {
    const TransferLayoutPlan& layout = *plan.tensors[steps[i].tensor].layout;
    // The steps of one unit of work: a broadcast chunk, or every message of one gathered
    // tensor.
    size_t j = i + 1;
    if (layout.collective == Collective::kAllGather) {
      while (j < steps.size() && steps[j].tensor == steps[i].tensor) ++j;
    }
    int64_t bytes = 0;
    for (size_t k = i; k < j; ++k) bytes += AlignUp16(steps[k].chunk->bytes);
    const bool joins =
        !out.empty() && out.back().kind == layout.collective &&
        (layout.collective == Collective::kAllGather || out.back().root == layout.root) &&
        out.back().bytes + bytes <= bucket;
    if (!joins) {
      Exchange x;
      x.kind = layout.collective;
      x.root = layout.root;
      x.first = schedule.steps.size();
      if (x.kind == Collective::kAllGather) x.counts.assign(static_cast<size_t>(world), 0);
      out.push_back(std::move(x));
    }
    Exchange& x = out.back();
    for (size_t k = i; k < j; ++k) {
      const TransferMessage& chunk = *steps[k].chunk;
      int64_t& at = x.kind == Collective::kAllGather ? x.counts[chunk.source_rank] : x.bytes;
      x.offsets.push_back(at);
      at += AlignUp16(chunk.bytes);
      if (x.kind == Collective::kAllGather) x.bytes += AlignUp16(chunk.bytes);
      schedule.steps.push_back(steps[k]);
      ++x.count;
    }
    if (x.kind == Collective::kAllGather) {
      schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, x.counts[rank]);
      schedule.receive_bucket_bytes = std::max(schedule.receive_bucket_bytes, x.bytes);
    } else {
      int64_t& side = x.root == rank ? schedule.send_bucket_bytes : schedule.receive_bucket_bytes;
      side = std::max(side, x.bytes);
    }
    i = j;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransferSchedule> ScheduleTransfer(const TransferPlan& plan, int64_t rank,
                                                  const TransferScheduleOptions& options) {
  const int64_t bucket = options.bucket_bytes;
  if (bucket < kMinBucketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard bucket_bytes ", bucket, " must be >= ", kMinBucketBytes));
  }
  const int64_t align = options.chunk_alignment;
  if (align < 1 || align > 256 || (align & (align - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard chunk alignment ", align, " is not a power of two in [1, 256]"));
  }
  if (rank < 0 || (plan.rank >= 0 && plan.rank != rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScheduleTransfer: rank ", rank, " of a plan of rank ", plan.rank));
  }
  TransferSchedule schedule;
  schedule.rank = rank;
  schedule.chunk_alignment = align;
  absl::flat_hash_map<const TransferLayoutPlan*,
                      std::shared_ptr<const std::vector<TransferMessage>>>
      cut;
  size_t total = 0;
  std::vector<TransferSchedule::Step> forwards, collective;
  // The previous tensor's layout and chunks: the common case is a repeated layout.
  const TransferLayoutPlan* last_layout = nullptr;
  std::shared_ptr<const std::vector<TransferMessage>> last_chunks;
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const TransferTensorPlan& tp = plan.tensors[t];
    auto [it, fresh] = tp.layout.get() == last_layout ? std::make_pair(cut.end(), false)
                                                      : cut.try_emplace(tp.layout.get());
    if (fresh) {
      auto chunks = std::make_shared<std::vector<TransferMessage>>();
      // An all-gathered message travels whole (every rank's part of a tensor in one
      // collective); other messages are cut to fit a bucket.
      const bool whole = tp.layout->collective == Collective::kAllGather;
      const auto mine = [&](const TransferMessage& message) {
        return message.source_rank == rank || message.destination_rank == rank ||
               message.destination_rank == kEveryRank;
      };
      // A message of B bytes makes at least B / bucket chunks: too many are refused before
      // they are made (a hostile header's one tensor of 2^60 bytes).
      uint64_t at_least = 0;
      for (const TransferMessage& message : tp.messages()) {
        if (!whole && mine(message)) at_least += static_cast<uint64_t>(message.bytes / bucket);
      }
      if (at_least > kMaxChunks - total) return TooManyChunks(bucket);
      for (const TransferMessage& message : tp.messages()) {
        if (!mine(message)) continue;
        std::vector<TransferMove> moves;
        for (const TransferMove& move : message.moves) {
          if (whole) {
            moves.push_back(move);
          } else {
            SDRT_RETURN_IF_ERROR(SplitMove(move, tp.dtype, bucket, moves));
          }
        }
        // Where each box lies in contiguous locals, for the host copies of every call.
        const std::vector<TransferPiece>& senders =
            message.forward ? tp.destination() : tp.source();
        for (TransferMove& move :
             IsSubByte(tp.dtype) ? absl::Span<TransferMove>() : absl::MakeSpan(moves)) {
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
        for (TransferMove& move : moves) {
          if (first || (!whole && chunks->back().bytes + move.bytes > bucket)) {
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
          return TooManyChunks(bucket);
        }
      }
      it->second = std::move(chunks);
    }
    if (it != cut.end()) {
      last_layout = tp.layout.get();
      last_chunks = it->second;
    }
    total += last_chunks->size();
    if (total > kMaxChunks) return TooManyChunks(bucket);
    schedule.chunks.push_back(last_chunks);
    for (const TransferMessage& chunk : *last_chunks) {
      if (chunk.destination_rank == kEveryRank) collective.push_back({t, &chunk});
    }
  }
  // The point-to-point chunks in the exchange order, each group's first step noted.
  const ExchangeOrder own_order =
      options.exchange_order == nullptr ? OrderExchanges(plan, bucket) : ExchangeOrder();
  const ExchangeOrder& order =
      options.exchange_order == nullptr ? own_order : *options.exchange_order;
  if (order.part_counts.size() != plan.tensors.size() ||
      order.parts.size() != order.tensors.size()) {
    return absl::InvalidArgumentError("an exchange order of another plan");
  }
  // The point-to-point chunks of each tensor cut in parts, sorted by part once (stable), so
  // that each of its items takes its own: a pass over every chunk of the tensor per part was
  // quadratic in the parts (a small bucket cuts a tensor into one part per receiver).
  std::vector<size_t> part_bounds_at(plan.tensors.size(), SIZE_MAX);  // into part_bounds
  std::vector<size_t> part_bounds;
  std::vector<const TransferMessage*> by_part;
  const auto sort_by_part = [&](size_t t) {
    const uint32_t parts = order.part_counts[t];
    std::vector<uint32_t> part_of;
    part_of.reserve(schedule.chunks[t]->size());
    std::vector<size_t> count(parts + 1, 0);
    for (const TransferMessage& chunk : *schedule.chunks[t]) {
      part_of.push_back(chunk.destination_rank == kEveryRank
                            ? parts
                            : PartOf(order, plan.tensors[t], t, chunk.destination_rank));
      ++count[part_of.back()];
    }
    part_bounds_at[t] = part_bounds.size();
    std::vector<size_t> next;  // where each part's next chunk goes
    size_t at = by_part.size();
    for (uint32_t p = 0; p <= parts; ++p) {
      part_bounds.push_back(at);
      next.push_back(at);
      at += count[p];
    }
    by_part.resize(at);
    size_t i = 0;
    for (const TransferMessage& chunk : *schedule.chunks[t]) by_part[next[part_of[i++]]++] = &chunk;
  };
  std::vector<TransferSchedule::Step> direct;
  direct.reserve(total);
  std::vector<size_t> direct_starts, forward_starts;
  // Whether each group's units may be interleaved by pair (InterleavePairs): not when a
  // tensor of it has Partial contributions, whose order at a receiver must stay the plan's.
  std::vector<uint8_t> groups_interleave;
  for (size_t g = 0; g < order.begin.size(); ++g) {
    direct_starts.push_back(direct.size());
    forward_starts.push_back(forwards.size());
    groups_interleave.push_back(1);
    const size_t end = g + 1 < order.begin.size() ? order.begin[g + 1] : order.tensors.size();
    for (size_t k = order.begin[g]; k < end; ++k) {
      const size_t t = order.tensors[k];
      if (t >= schedule.chunks.size()) {
        return absl::InvalidArgumentError("an exchange order of another plan");
      }
      if (plan.tensors[t].contributions() > 1) groups_interleave.back() = 0;
      if (order.part_counts[t] == 1) {
        for (const TransferMessage& chunk : *schedule.chunks[t]) {
          if (chunk.destination_rank != kEveryRank) {
            (chunk.forward ? forwards : direct).push_back({t, &chunk});
          }
        }
        continue;
      }
      if (order.parts[k] >= order.part_counts[t]) continue;  // no chunk is in it
      if (part_bounds_at[t] == SIZE_MAX) sort_by_part(t);
      const size_t first = part_bounds[part_bounds_at[t] + order.parts[k]];
      const size_t last = part_bounds[part_bounds_at[t] + order.parts[k] + 1];
      for (size_t c = first; c < last; ++c) {
        (by_part[c]->forward ? forwards : direct).push_back({t, by_part[c]});
      }
    }
  }
  std::vector<size_t> group_starts;  // units that open an exchange, ascending
  std::vector<uint8_t> interleave;   // whether each of those groups is interleaved
  AppendUnits(direct, bucket, direct_starts, groups_interleave, schedule, group_starts, interleave);
  const size_t direct_units = schedule.units.size();
  AppendUnits(forwards, bucket, forward_starts, groups_interleave, schedule, group_starts,
              interleave);
  {
    std::vector<uint32_t> nth, counters;
    for (size_t j = 0; j < group_starts.size(); ++j) {
      const size_t end = j + 1 < group_starts.size() ? group_starts[j + 1] : schedule.units.size();
      if (interleave[j]) InterleavePairs(rank, group_starts[j], end, schedule, nth, counters);
    }
  }
  // Exchanges: consecutive units of one phase while neither side passes a bucket (at
  // least one unit); units to itself do not count: they are copied local to local during
  // the exchange or go through the send bucket after it (program.h).
  size_t i = 0;
  // A rank whose direct chunks all go to itself copies them without an exchange.
  if (std::all_of(schedule.units.begin(), schedule.units.begin() + direct_units,
                  [&](const TransferSchedule::Unit& u) {
                    return u.source_rank == rank && u.destination_rank == rank;
                  })) {
    for (; i < direct_units; ++i) {
      schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, schedule.units[i].bytes);
    }
    schedule.local_units = direct_units;
  }
  auto next_start = group_starts.begin();
  while (i < schedule.units.size()) {
    if (i == direct_units) schedule.direct_exchanges = schedule.begin.size();
    schedule.begin.push_back(i);
    while (next_start != group_starts.end() && *next_start <= i) ++next_start;
    const size_t group_end = next_start == group_starts.end() ? schedule.units.size() : *next_start;
    const size_t phase_end =
        std::min(group_end, i < direct_units ? direct_units : schedule.units.size());
    int64_t sent = 0, received = 0;
    for (; i < phase_end; ++i) {
      const TransferSchedule::Unit& u = schedule.units[i];
      if (u.source_rank == rank && u.destination_rank == rank) {
        schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, u.bytes);
        continue;
      }
      int64_t& side = u.source_rank == rank ? sent : received;
      const int64_t at = AlignUp(side, align);
      if (side > 0 && at + u.bytes > bucket) break;
      side = at + u.bytes;
    }
    schedule.send_bucket_bytes = std::max(schedule.send_bucket_bytes, sent);
    schedule.receive_bucket_bytes = std::max(schedule.receive_bucket_bytes, received);
  }
  if (direct_units == schedule.units.size()) schedule.direct_exchanges = schedule.begin.size();
  if (!schedule.begin.empty()) schedule.begin.push_back(i);
  SDRT_RETURN_IF_ERROR(AppendCollectives(plan, collective, bucket, schedule));
  return schedule;
}

int64_t SendingExchanges(const TransferSchedule& schedule) {
  int64_t sending = 0;
  for (size_t x = 0; x < schedule.exchanges(); ++x) {
    for (size_t u = schedule.begin[x]; u < schedule.begin[x + 1]; ++u) {
      if (schedule.units[u].source_rank == schedule.rank) {
        ++sending;
        break;
      }
    }
  }
  return sending;
}

}  // namespace sdrt::internal
