#include "sdrt/core/distributed/internal/reshard_execute.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_pack.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tensor/storage.h"

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

// Memory of `bytes` bytes on `device` for a bucket.
absl::StatusOr<std::shared_ptr<Storage>> Bucket(Device device, int64_t bytes) {
  if (device.is_cpu()) return Storage::AllocateCpu(bytes);
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
  return backend->Allocate(bytes, device);
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
  // least one unit); units to itself do not count, they go through the send bucket after
  // the exchange.
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
  ReshardExecuteStats local_stats;
  ReshardExecuteStats& st = stats != nullptr ? *stats : local_stats;
  st = ReshardExecuteStats{};
  if (sources.size() != plan.tensors.size() || destinations.size() != plan.tensors.size() ||
      schedule.chunks.size() != plan.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExecuteReshard: ", sources.size(), " source and ", destinations.size(),
                     " destination lists and a schedule of ", schedule.chunks.size(),
                     " tensors for a plan of ", plan.tensors.size(), " tensors"));
  }
  const int64_t me = comm.rank();
  const int64_t mine_direct = static_cast<int64_t>(schedule.direct_exchanges);
  const int64_t mine_forward = static_cast<int64_t>(schedule.exchanges()) - mine_direct;
  if (schedule.rank != me || exchanges.direct < mine_direct || exchanges.forward < mine_forward) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExecuteReshard: rank ", me, " was given the schedule of rank ", schedule.rank,
                     " with ", mine_direct, " + ", mine_forward, " exchanges, to run in ",
                     exchanges.direct, " + ", exchanges.forward));
  }
  // Every local this rank's pieces need, checked before anything moves (unless the
  // caller did), and its ref made a checked one.
  for (size_t t = 0; t < plan.tensors.size() && !(sources.checked && destinations.checked); ++t) {
    const ReshardTensorPlan& tp = plan.tensors[t];
    for (const auto* side : {&tp.source(), &tp.destination()}) {
      const bool is_source = side == &tp.source();
      ReshardLocals& all = is_source ? sources : destinations;
      const LocalRefs locals = all.of(t);
      for (const ReshardPiece& piece : *side) {
        if (piece.rank != me) continue;
        const Tensor* const local =
            piece.local < static_cast<int>(locals.size()) ? locals[piece.local].tensor : nullptr;
        const bool ok = local != nullptr && local->defined() && local->dtype() == tp.dtype &&
                        local->shape() == piece.local_shape && local->device() == comm.device();
        if (!ok) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ExecuteReshard: tensor '", tp.name, "': rank ", me, " needs ",
              is_source ? "source" : "destination", " local ", piece.local, " as ",
              DTypeName(tp.dtype), ShapeToString(piece.local_shape), " on ",
              comm.device().ToString(), "; it gave ",
              piece.local < static_cast<int>(locals.size())
                  ? (local != nullptr && local->defined() ? local->ToString() : "undefined")
                  : absl::StrCat(locals.size(), " locals")));
        }
        all.tensors[all.begin[t] + static_cast<size_t>(piece.local)] = CheckedRef(*local);
      }
    }
  }
  sources.checked = destinations.checked = true;
  for (const ReshardSchedule::Step& step : schedule.steps) {
    const ReshardMessage& c = *step.chunk;
    if (c.source_rank >= comm.size() || c.destination_rank >= comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExecuteReshard: the plan moves bytes from rank ", c.source_rank, " to rank ",
          c.destination_rank, "; the communicator has ", comm.size(), " ranks"));
    }
  }
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> send_bucket,
                        Bucket(comm.device(), schedule.send_bucket_bytes));
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> receive_bucket,
                        Bucket(comm.device(), schedule.receive_bucket_bytes));
  st.buffer_bytes = schedule.send_bucket_bytes + schedule.receive_bucket_bytes;
  auto* const send_base = static_cast<char*>(send_bucket->data());
  auto* const receive_base = static_cast<char*>(receive_bucket->data());
  std::vector<Communicator::SendMessage> sends;
  std::vector<Communicator::ReceiveMessage> receives;
  std::vector<bool> received_direct;  // per unit of the exchange
  // The source locals of a chunk: a forward's are the relay's destination locals.
  auto from = [&](const ReshardSchedule::Step& step) {
    return step.chunk->forward ? destinations.of(step.tensor) : sources.of(step.tensor);
  };
  for (int64_t e = 0; e < exchanges.direct + exchanges.forward; ++e) {
    sends.clear();
    receives.clear();
    // This rank's exchange of the phase, if it has that many.
    const bool direct = e < exchanges.direct;
    const int64_t k = direct ? e : mine_direct + (e - exchanges.direct);
    const bool mine = direct ? e < mine_direct : e - exchanges.direct < mine_forward;
    const size_t first = mine ? schedule.begin[k] : 0, last = mine ? schedule.begin[k + 1] : 0;
    int64_t send_at = 0, receive_at = 0;
    received_direct.assign(last - first, false);
    for (size_t i = first; i < last; ++i) {
      const ReshardSchedule::Unit& u = schedule.units[i];
      if (u.source_rank == me && u.destination_rank != me) {
        // A large box of a dense local goes on the wire from where it is.
        const ReshardSchedule::Step& only = schedule.steps[u.first];
        if (char* const range = u.count == 1 && comm.device().is_cpu()
                                    ? DirectRange(plan.tensors[only.tensor], *only.chunk,
                                                  from(only), /*to_local=*/false)
                                    : nullptr) {
          sends.push_back({static_cast<int>(u.destination_rank), range, u.bytes});
          st.sent_bytes += u.bytes;
          st.direct_bytes += u.bytes;
          continue;
        }
        int64_t at = send_at;
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const ReshardSchedule::Step& step = schedule.steps[j];
          SDRT_RETURN_IF_ERROR(
              PackMessage(plan.tensors[step.tensor], *step.chunk, from(step), send_bucket, at));
          at += step.chunk->bytes;
        }
        sends.push_back({static_cast<int>(u.destination_rank), send_base + send_at, u.bytes});
        st.sent_bytes += u.bytes;
        send_at += u.bytes;
      } else if (u.source_rank != me) {
        // ... and lands where it belongs.
        const ReshardSchedule::Step& only = schedule.steps[u.first];
        char* const range = u.count == 1 && comm.device().is_cpu()
                                ? DirectRange(plan.tensors[only.tensor], *only.chunk,
                                              destinations.of(only.tensor), /*to_local=*/true)
                                : nullptr;
        received_direct[i - first] = range != nullptr;
        if (range != nullptr) {
          receives.push_back({static_cast<int>(u.source_rank), range, u.bytes});
          st.received_bytes += u.bytes;
          st.direct_bytes += u.bytes;
          continue;
        }
        receives.push_back({static_cast<int>(u.source_rank), receive_base + receive_at, u.bytes});
        st.received_bytes += u.bytes;
        receive_at += u.bytes;
      }
    }
    SDRT_RETURN_IF_ERROR(comm.Exchange(sends, receives));
    ++st.rounds;
    // Unpacked in order (a later Partial contribution is reduced into what an earlier one
    // wrote); a chunk to itself goes through the send bucket, free now.
    receive_at = 0;
    for (size_t i = first; i < last; ++i) {
      const ReshardSchedule::Unit& u = schedule.units[i];
      if ((u.source_rank == me && u.destination_rank != me) || received_direct[i - first]) {
        continue;
      }
      for (size_t j = u.first; j < u.first + u.count; ++j) {
        const ReshardSchedule::Step& step = schedule.steps[j];
        const ReshardMessage& c = *step.chunk;
        const ReshardTensorPlan& tp = plan.tensors[step.tensor];
        if (u.source_rank == me) {
          if (!CopyMessageDirect(tp, c, from(step), destinations.of(step.tensor))) {
            SDRT_RETURN_IF_ERROR(PackMessage(tp, c, from(step), send_bucket, 0));
            SDRT_RETURN_IF_ERROR(
                UnpackMessage(tp, c, send_bucket, 0, destinations.of(step.tensor)));
          }
          st.self_bytes += c.bytes;
        } else {
          SDRT_RETURN_IF_ERROR(
              UnpackMessage(tp, c, receive_bucket, receive_at, destinations.of(step.tensor)));
          receive_at += c.bytes;
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
