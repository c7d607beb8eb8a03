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

}  // namespace

absl::StatusOr<ReshardSchedule> ScheduleReshard(const ReshardPlan& plan,
                                                const ReshardExecuteOptions& options) {
  const int64_t bucket = options.bucket_bytes;
  if (bucket < kMinBucketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("reshard bucket_bytes ", bucket, " must be >= ", kMinBucketBytes));
  }
  ReshardSchedule schedule;
  for (const ReshardMessage& message : plan.messages) {
    const DType dtype = plan.tensors[message.tensor].dtype;
    std::vector<ReshardMove> moves;
    for (const ReshardMove& move : message.moves) {
      SDRT_RETURN_IF_ERROR(SplitMove(move, dtype, bucket, moves));
    }
    // Consecutive moves share a chunk while it stays within the bucket.
    for (ReshardMove& move : moves) {
      const ReshardMessage* last = schedule.chunks.empty() ? nullptr : &schedule.chunks.back();
      if (last == nullptr || last->tensor != message.tensor ||
          last->source_rank != message.source_rank ||
          last->destination_rank != message.destination_rank ||
          last->contribution != message.contribution || last->bytes + move.bytes > bucket) {
        ReshardMessage chunk;
        chunk.tensor = message.tensor;
        chunk.source_rank = message.source_rank;
        chunk.destination_rank = message.destination_rank;
        chunk.contribution = message.contribution;
        schedule.chunks.push_back(std::move(chunk));
        if (schedule.chunks.size() > kMaxChunks) {
          return absl::InvalidArgumentError("more than 2^24 reshard chunks");
        }
      }
      schedule.chunks.back().bytes += move.bytes;
      schedule.chunks.back().moves.push_back(std::move(move));
    }
  }
  // Rounds: chunks in order; a chunk starts a new round when its sender or receiver would
  // go past a bucket in this one.
  absl::flat_hash_map<int64_t, int64_t> sent, received;
  for (size_t i = 0; i < schedule.chunks.size(); ++i) {
    const ReshardMessage& c = schedule.chunks[i];
    int64_t& s = sent[c.source_rank];
    const bool self = c.source_rank == c.destination_rank;
    const int64_t r = self ? 0 : received[c.destination_rank];
    if (i == 0 || (s > 0 && s + c.bytes > bucket) || (!self && r > 0 && r + c.bytes > bucket)) {
      schedule.round_begin.push_back(i);
      sent.clear();
      received.clear();
    }
    sent[c.source_rank] += c.bytes;
    if (!self) received[c.destination_rank] += c.bytes;
  }
  schedule.round_begin.push_back(schedule.chunks.size());
  if (schedule.chunks.empty()) schedule.round_begin.clear();
  return schedule;
}

absl::Status ExecuteReshard(const ReshardPlan& plan, const ReshardSchedule& schedule,
                            Communicator& comm, absl::Span<const std::vector<Tensor>> sources,
                            absl::Span<const std::vector<Tensor>> destinations,
                            ReshardExecuteStats* stats) {
  ReshardExecuteStats local_stats;
  ReshardExecuteStats& st = stats != nullptr ? *stats : local_stats;
  st = ReshardExecuteStats{};
  if (sources.size() != plan.tensors.size() || destinations.size() != plan.tensors.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExecuteReshard: ", sources.size(), " source and ", destinations.size(),
                     " destination lists for a plan of ", plan.tensors.size(), " tensors"));
  }
  const int64_t me = comm.rank();
  // Every local this rank's pieces need, checked before anything moves.
  for (size_t t = 0; t < plan.tensors.size(); ++t) {
    const ReshardTensorPlan& tp = plan.tensors[t];
    for (const auto* side : {&tp.source, &tp.destination}) {
      const std::vector<Tensor>& locals = side == &tp.source ? sources[t] : destinations[t];
      for (const ReshardPiece& piece : *side) {
        if (piece.rank != me) continue;
        const bool ok = piece.local < static_cast<int>(locals.size()) &&
                        locals[piece.local].defined() && locals[piece.local].dtype() == tp.dtype &&
                        locals[piece.local].shape() == piece.local_shape &&
                        locals[piece.local].device() == comm.device();
        if (!ok) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ExecuteReshard: tensor '", tp.name, "': rank ", me, " needs ",
              side == &tp.source ? "source" : "destination", " local ", piece.local, " as ",
              DTypeName(tp.dtype), ShapeToString(piece.local_shape), " on ",
              comm.device().ToString(), "; it gave ",
              piece.local < static_cast<int>(locals.size())
                  ? (locals[piece.local].defined() ? locals[piece.local].ToString() : "undefined")
                  : absl::StrCat(locals.size(), " locals")));
        }
      }
    }
  }
  // This rank's bucket sizes: its largest round on each side.
  int64_t send_bytes = 0, receive_bytes = 0;
  for (size_t round = 0; round < schedule.rounds(); ++round) {
    int64_t s = 0, r = 0;
    for (size_t i = schedule.round_begin[round]; i < schedule.round_begin[round + 1]; ++i) {
      const ReshardMessage& c = schedule.chunks[i];
      if (c.source_rank >= comm.size() || c.destination_rank >= comm.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "ExecuteReshard: the plan moves bytes from rank ", c.source_rank, " to rank ",
            c.destination_rank, "; the communicator has ", comm.size(), " ranks"));
      }
      if (c.source_rank == me) s += c.bytes;
      if (c.destination_rank == me && c.source_rank != me) r += c.bytes;
    }
    send_bytes = std::max(send_bytes, s);
    receive_bytes = std::max(receive_bytes, r);
  }
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> send_bucket,
                        Bucket(comm.device(), send_bytes));
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> receive_bucket,
                        Bucket(comm.device(), receive_bytes));
  st.buffer_bytes = send_bytes + receive_bytes;
  auto* const send_base = static_cast<char*>(send_bucket->data());
  auto* const receive_base = static_cast<char*>(receive_bucket->data());
  std::vector<Communicator::SendMessage> sends;
  std::vector<Communicator::ReceiveMessage> receives;
  // The chunks this rank unpacks in a round, in chunk order (a later Partial contribution
  // is reduced into what an earlier one wrote): the chunk, its bucket and offset.
  struct Unpack {
    const ReshardMessage* chunk;
    const std::shared_ptr<Storage>* bucket;
    int64_t at;
  };
  std::vector<Unpack> unpack;
  for (size_t round = 0; round < schedule.rounds(); ++round) {
    sends.clear();
    receives.clear();
    unpack.clear();
    int64_t send_at = 0, receive_at = 0;
    for (size_t i = schedule.round_begin[round]; i < schedule.round_begin[round + 1]; ++i) {
      const ReshardMessage& c = schedule.chunks[i];
      if (c.source_rank == me) {
        SDRT_RETURN_IF_ERROR(PackMessage(plan, c, sources[c.tensor], send_bucket, send_at));
        if (c.destination_rank == me) {
          unpack.push_back({&c, &send_bucket, send_at});
          st.self_bytes += c.bytes;
        } else {
          sends.push_back({static_cast<int>(c.destination_rank), send_base + send_at, c.bytes});
          st.sent_bytes += c.bytes;
        }
        send_at += c.bytes;
      } else if (c.destination_rank == me) {
        receives.push_back({static_cast<int>(c.source_rank), receive_base + receive_at, c.bytes});
        unpack.push_back({&c, &receive_bucket, receive_at});
        st.received_bytes += c.bytes;
        receive_at += c.bytes;
      }
    }
    SDRT_RETURN_IF_ERROR(comm.Exchange(sends, receives));
    ++st.rounds;
    for (const Unpack& u : unpack) {
      SDRT_RETURN_IF_ERROR(
          UnpackMessage(plan, *u.chunk, *u.bucket, u.at, destinations[u.chunk->tensor]));
    }
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
