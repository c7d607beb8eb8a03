#include "sdrt/core/distributed/internal/engine/program.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/self_copy.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Memory of `bytes` bytes on `device` for a bucket.
absl::StatusOr<std::shared_ptr<Storage>> Bucket(Device device, int64_t bytes) {
  if (device.is_cpu() || bytes == 0) return Storage::AllocateCpu(bytes);
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
  return backend->Allocate(bytes, device);
}

// Every local this rank's pieces need, checked against its piece, and its ref made a
// checked one (unless the caller did so).
absl::Status CheckLocals(const TransferPlan& plan, const TransferSite& comm,
                         TransferLocals& sources, TransferLocals& destinations) {
  const int64_t me = comm.rank();
  for (size_t t = 0; t < plan.tensors.size() && !(sources.checked && destinations.checked); ++t) {
    const TransferTensorPlan& tp = plan.tensors[t];
    for (const auto* side : {&tp.source(), &tp.destination()}) {
      const bool is_source = side == &tp.source();
      TransferLocals& all = is_source ? sources : destinations;
      const LocalRefs locals = all.of(t);
      for (const TransferPiece& piece : *side) {
        if (piece.rank != me) continue;
        const Tensor* const local =
            piece.local < static_cast<int>(locals.size()) ? locals[piece.local].tensor : nullptr;
        // CPU locals of a device communicator are staged through its buckets.
        const DType dtype = is_source ? tp.source_dtype() : tp.destination_dtype();
        const bool ok = local != nullptr && local->defined() && local->dtype() == dtype &&
                        local->shape() == piece.local_shape &&
                        (local->device() == comm.device() || local->device().is_cpu());
        if (!ok) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ExecuteReshard: tensor '", tp.name, "': rank ", me, " needs ",
              is_source ? "source" : "destination", " local ", piece.local, " as ",
              DTypeName(dtype), ShapeToString(piece.local_shape), " on ", comm.device().ToString(),
              comm.device().is_cpu() ? "" : " or the CPU", "; it gave ",
              piece.local < static_cast<int>(locals.size())
                  ? (local != nullptr && local->defined() ? local->ToString() : "undefined")
                  : absl::StrCat(locals.size(), " locals")));
        }
        all.tensors[all.begin[t] + static_cast<size_t>(piece.local)] = CheckedRef(*local);
      }
    }
  }
  sources.checked = destinations.checked = true;
  return absl::OkStatus();
}

// Unimplemented, on every rank alike (it reads the plan, which every rank shares, not its
// own messages), when a tensor has Partial contributions to reduce at the receivers and the
// buckets are off the CPU: UnpackMessage reduces from CPU buffers only. Refused before
// anything moves, so that no rank fails in the middle of a run while the others wait.
absl::Status RefuseDeviceReductions(const TransferPlan& plan, const TransferSite& comm) {
  if (comm.device().is_cpu()) return absl::OkStatus();
  for (const TransferTensorPlan& tp : plan.tensors) {
    if (tp.contributions() > 1) {
      return absl::UnimplementedError(absl::StrCat(
          "reshard of tensor '", tp.name, "': its ", tp.contributions(),
          " Partial contributions would be reduced from buckets on ", comm.device().ToString(),
          "; they are reduced from CPU buffers only (reshard over a CPU communicator, or "
          "into a layout that every contributing rank holds whole)"));
    }
  }
  return absl::OkStatus();
}

// Appends `copies` to `ops` as copy ops.
void AppendCopies(const std::vector<BoxCopy>& copies, std::vector<TransferProgram::Op>& ops) {
  for (const BoxCopy& c : copies) {
    TransferProgram::Op op;
    op.from = c.from;
    op.to = c.to;
    op.bytes = c.bytes;
    ops.push_back(op);
  }
}

// How a chunk to itself that is not dense host ranges is copied: on a device communicator
// straight from local to local where its boxes and locals allow (CopiesToSelfDirectly),
// else through the send bucket.
TransferProgram::Op::Kind SelfKind(const TransferTensorPlan& tp, const TransferMessage& chunk,
                                   LocalRefs from, LocalRefs to, Device device) {
  using Kind = TransferProgram::Op::Kind;
  return !device.is_cpu() && CopiesToSelfDirectly(tp, chunk, from, to, device) ? Kind::kSelfDirect
                                                                               : Kind::kSelf;
}

// A step that goes through PackMessage / UnpackMessage.
void AppendStep(TransferProgram::Op::Kind kind, size_t step, int64_t offset,
                std::vector<TransferProgram::Op>& ops) {
  TransferProgram::Op op;
  op.kind = kind;
  op.step = step;
  op.offset = offset;
  ops.push_back(op);
}

// Appends the schedule's collective exchanges to `program` (see TransferProgram::Exchange):
// packing of this rank's chunks before, unpacking of what it receives after (a broadcast
// root's own destination from what it packed).
absl::Status CompileCollectives(const TransferPlan& plan, const TransferSchedule& schedule,
                                const TransferSite& comm, const TransferLocals& sources,
                                const TransferLocals& destinations, TransferProgram& program) {
  using Kind = TransferProgram::Op::Kind;
  const int64_t me = comm.rank();
  const bool host = comm.device().is_cpu();
  char* const send_base = static_cast<char*>(program.send_bucket->data());
  char* const receive_base = static_cast<char*>(program.receive_bucket->data());
  TransferRunStats& st = program.stats;
  std::vector<BoxCopy> copies;
  std::vector<TransferProgram::Op> after;
  // An op or two per chunk (packing on the sender, unpacking everywhere): room for them
  // once, not the doublings of 10,000-op vectors.
  size_t chunks = 0;
  for (const TransferSchedule::CollectiveExchange& c : schedule.collectives) {
    chunks += c.count;
  }
  program.ops.reserve(program.ops.size() + 2 * chunks);
  for (const TransferSchedule::CollectiveExchange& c : schedule.collectives) {
    if (c.kind == Collective::kAllGather && static_cast<int64_t>(c.counts.size()) != comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ExecuteReshard: an all-gather planned for ",
                                                     c.counts.size(),
                                                     " ranks on a communicator of ", comm.size()));
    }
    TransferProgram::Exchange x;
    x.kind = c.kind;
    x.root = static_cast<int>(c.root);
    x.bytes = c.bytes;
    x.counts_begin = program.counts.size();
    program.counts.insert(program.counts.end(), c.counts.begin(), c.counts.end());
    // Where each rank's segment starts in the gathered bucket.
    std::vector<int64_t> segment(c.counts.size() + 1, 0);
    for (size_t q = 0; q < c.counts.size(); ++q) segment[q + 1] = segment[q] + c.counts[q];
    x.ops_begin = program.ops.size();
    after.clear();
    after.reserve(c.count);
    const bool root = c.kind == Collective::kBroadcast && c.root == me;
    for (size_t k = 0; k < c.count; ++k) {
      const size_t j = c.first + k;
      const TransferSchedule::Step& step = schedule.steps[j];
      const TransferMessage& m = *step.chunk;
      const TransferTensorPlan& tp = plan.tensors[step.tensor];
      const int64_t offset = c.offsets[k];
      if (m.source_rank == me) {  // packed into the send bucket
        copies.clear();
        if (host && BucketBoxes(tp, m, sources.of(step.tensor), send_base + offset,
                                /*to_local=*/false, copies)) {
          AppendCopies(copies, program.ops);
        } else {
          AppendStep(Kind::kPack, j, offset, program.ops);
        }
        st.sent_bytes += m.bytes * (comm.size() - 1);
        x.moved += m.bytes * (comm.size() - 1);
      }
      // Every rank's destination takes every chunk: the root's from its send bucket, an
      // all-gather's from the sender's segment of the gathered bucket.
      char* const slot = root ? send_base + offset
                              : receive_base + offset +
                                    (c.kind == Collective::kAllGather ? segment[m.source_rank] : 0);
      copies.clear();
      if (host &&
          BucketBoxes(tp, m, destinations.of(step.tensor), slot, /*to_local=*/true, copies)) {
        AppendCopies(copies, after);
      } else {
        AppendStep(root ? Kind::kUnpackSent : Kind::kUnpack, j,
                   slot - (root ? send_base : receive_base), after);
      }
      if (m.source_rank == me) {
        st.self_bytes += m.bytes;
      } else {
        st.received_bytes += m.bytes;
        x.moved += m.bytes;
      }
    }
    x.ops_during = x.ops_split = program.ops.size();
    program.ops.insert(program.ops.end(), after.begin(), after.end());
    x.ops_end = program.ops.size();
    x.sends_begin = x.sends_end = program.sends.size();
    x.receives_begin = x.receives_end = program.receives.size();
    program.exchanges.push_back(x);
    ++st.rounds;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TransferProgram> CompileTransfer(const TransferPlan& plan,
                                                const TransferSchedule& schedule,
                                                ExchangeCounts exchanges, const TransferSite& comm,
                                                TransferLocals& sources,
                                                TransferLocals& destinations) {
  using Kind = TransferProgram::Op::Kind;
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
  SDRT_RETURN_IF_ERROR(RefuseDeviceReductions(plan, comm));
  SDRT_RETURN_IF_ERROR(CheckLocals(plan, comm, sources, destinations));
  for (const TransferSchedule::Step& step : schedule.steps) {
    const TransferMessage& c = *step.chunk;
    if (c.source_rank >= comm.size() || c.destination_rank >= comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExecuteReshard: the plan moves bytes from rank ", c.source_rank, " to rank ",
          c.destination_rank, "; the communicator has ", comm.size(), " ranks"));
    }
  }
  TransferProgram program;
  TransferRunStats& st = program.stats;
  const bool host = comm.device().is_cpu();
  // The source locals of a chunk: a forward's are the relay's destination locals.
  auto from = [&](const TransferSchedule::Step& step) {
    return step.chunk->forward ? destinations.of(step.tensor) : sources.of(step.tensor);
  };
  std::vector<BoxCopy> copies;
  const int64_t align = schedule.chunk_alignment;
  // An exchange's ops while its messages move and after it (packing goes straight into
  // program.ops, before them). After it, in unit order: unpacking (a later Partial
  // contribution is reduced into what an earlier one wrote) and the chunks to itself that go
  // through the send bucket, free by then. The chunks to itself copied local to local are
  // copied while the messages move: that moves a contribution-0 chunk earlier, which its
  // elements allow (no message of this exchange writes them, every element of a destination
  // piece coming from one source, and later contributions are reduced into them after it).
  std::vector<TransferProgram::Op> during, after;
  // An op per step, mostly: room for them once (10,000-op vectors grown by doublings cost
  // about 0.1 ms a call).
  program.ops.reserve(schedule.steps.size());
  during.reserve(schedule.steps.size());
  after.reserve(schedule.steps.size());
  // The chunks to itself of a rank that has nothing else to move: copied in plan order,
  // outside any exchange.
  for (size_t i = 0; i < schedule.local_units; ++i) {
    const TransferSchedule::Unit& u = schedule.units[i];
    for (size_t j = u.first; j < u.first + u.count; ++j) {
      const TransferSchedule::Step& step = schedule.steps[j];
      copies.clear();
      if (DirectBoxes(plan.tensors[step.tensor], *step.chunk, from(step),
                      destinations.of(step.tensor), copies)) {
        AppendCopies(copies, program.ops);
      } else {
        AppendStep(SelfKind(plan.tensors[step.tensor], *step.chunk, from(step),
                            destinations.of(step.tensor), comm.device()),
                   j, 0, program.ops);
      }
      st.self_bytes += step.chunk->bytes;
    }
  }
  program.local_ops_end = program.ops.size();
  // The buckets: none for a rank whose only copies go local to local (no device memory is
  // touched then), the send bucket alone for chunks to itself that go through it.
  const bool exchanging = exchanges.direct + exchanges.forward > 0 || !schedule.collectives.empty();
  const bool self_steps =
      std::any_of(program.ops.begin(), program.ops.end(),
                  [](const TransferProgram::Op& op) { return op.kind == Kind::kSelf; });
  // Two send buckets when this rank packs for more than one exchange: the next exchange
  // is packed into one while the other's messages move (program.h).
  const int64_t point_to_point = exchanges.direct + exchanges.forward;
  const int64_t half_bytes =
      AlignUp(exchanging || self_steps ? schedule.send_bucket_bytes : 0, align);
  const int64_t sending = SendingExchanges(schedule);
  const bool two_halves = sending > 1;
  const int64_t send_bytes = two_halves ? 2 * half_bytes : half_bytes;
  const int64_t receive_bytes = exchanging ? schedule.receive_bucket_bytes : 0;
  SDRT_ASSIGN_OR_RETURN(program.send_bucket, Bucket(comm.device(), send_bytes));
  SDRT_ASSIGN_OR_RETURN(program.receive_bucket, Bucket(comm.device(), receive_bytes));
  st.buffer_bytes = send_bytes + receive_bytes;
  // The buckets' memory (a device's off the CPU: then only the wire writes and reads there).
  char* const receive_base = static_cast<char*>(program.receive_bucket->data());
  for (int64_t e = 0; e < point_to_point; ++e) {
    TransferProgram::Exchange x;
    // Its half of the send bucket; packed while the exchange before it moves, unless it
    // forwards what the exchanges before it received (the first forward exchange).
    const int64_t half_at = two_halves && e % 2 == 1 ? half_bytes : 0;
    char* const send_base = static_cast<char*>(program.send_bucket->data()) + half_at;
    x.prefetched = PackedAhead(e, exchanges.direct, sending);
    x.ops_begin = program.ops.size();
    x.sends_begin = program.sends.size();
    x.receives_begin = program.receives.size();
    during.clear();
    after.clear();
    // This rank's exchange of the phase, if it has that many.
    const bool direct = e < exchanges.direct;
    const int64_t k = direct ? e : mine_direct + (e - exchanges.direct);
    const bool mine = direct ? e < mine_direct : e - exchanges.direct < mine_forward;
    const size_t first = mine ? schedule.begin[k] : 0, last = mine ? schedule.begin[k + 1] : 0;
    int64_t send_at = 0, receive_at = 0;
    for (size_t i = first; i < last; ++i) {
      const TransferSchedule::Unit& u = schedule.units[i];
      const TransferSchedule::Step& only = schedule.steps[u.first];
      if (u.source_rank == me && u.destination_rank == me) {
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const TransferSchedule::Step& step = schedule.steps[j];
          copies.clear();
          const TransferTensorPlan& tp = plan.tensors[step.tensor];
          if (DirectBoxes(tp, *step.chunk, from(step), destinations.of(step.tensor), copies)) {
            AppendCopies(copies, during);
          } else if (SelfKind(tp, *step.chunk, from(step), destinations.of(step.tensor),
                              comm.device()) == Kind::kSelfDirect) {
            // Before the exchange's messages, on the stream they go on: a copy enqueued
            // after them would only wait for them, and one that blocks would block the
            // calling thread behind them without the exchange's deadline.
            AppendStep(Kind::kSelfDirect, j, 0, program.ops);
          } else {
            AppendStep(Kind::kSelf, j, half_at, after);
          }
          st.self_bytes += step.chunk->bytes;
        }
      } else if (u.source_rank == me) {
        // A large box of a dense local goes on the wire from where it is.
        if (char* const range = u.count == 1 && host
                                    ? DirectRange(plan.tensors[only.tensor], *only.chunk,
                                                  from(only), /*to_local=*/false)
                                    : nullptr) {
          program.sends.push_back({static_cast<int>(u.destination_rank), range, u.bytes});
          st.sent_bytes += u.bytes;
          x.moved += u.bytes;
          st.direct_bytes += u.bytes;
          continue;
        }
        // The schedule sized the bucket for this exchange; a unit past its end is a bug.
        send_at = AlignUp(send_at, align);
        if (send_at + u.bytes > half_bytes) {
          return absl::InternalError(absl::StrCat("ExecuteReshard: a unit of ", u.bytes,
                                                  " bytes at ", send_at,
                                                  " overruns the send bucket"));
        }
        int64_t at = send_at;
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const TransferSchedule::Step& step = schedule.steps[j];
          at = AlignUp(at, align);
          copies.clear();
          if (host && BucketBoxes(plan.tensors[step.tensor], *step.chunk, from(step),
                                  send_base + at, /*to_local=*/false, copies)) {
            AppendCopies(copies, program.ops);
          } else {
            AppendStep(Kind::kPack, j, half_at + at, program.ops);
          }
          at += step.chunk->bytes;
        }
        program.sends.push_back(
            {static_cast<int>(u.destination_rank), send_base + send_at, u.bytes});
        st.sent_bytes += u.bytes;
        x.moved += u.bytes;
        send_at += u.bytes;
      } else if (u.destination_rank == me) {
        st.received_bytes += u.bytes;
        x.moved += u.bytes;
        // ... and lands where it belongs.
        if (char* const range = u.count == 1 && host
                                    ? DirectRange(plan.tensors[only.tensor], *only.chunk,
                                                  destinations.of(only.tensor), /*to_local=*/true)
                                    : nullptr) {
          program.receives.push_back({static_cast<int>(u.source_rank), range, u.bytes});
          st.direct_bytes += u.bytes;
          continue;
        }
        receive_at = AlignUp(receive_at, align);
        if (receive_at + u.bytes > program.receive_bucket->nbytes()) {
          return absl::InternalError(absl::StrCat("ExecuteReshard: a unit of ", u.bytes,
                                                  " bytes at ", receive_at,
                                                  " overruns the receive bucket"));
        }
        program.receives.push_back(
            {static_cast<int>(u.source_rank), receive_base + receive_at, u.bytes});
        int64_t at = receive_at;
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const TransferSchedule::Step& step = schedule.steps[j];
          const TransferMessage& c = *step.chunk;
          at = AlignUp(at, align);
          copies.clear();
          if (host && BucketBoxes(plan.tensors[step.tensor], c, destinations.of(step.tensor),
                                  receive_base + at, /*to_local=*/true, copies)) {
            AppendCopies(copies, after);
          } else {
            AppendStep(Kind::kUnpack, j, at, after);
          }
          at += c.bytes;
        }
        receive_at += u.bytes;
      }
    }
    x.ops_during = program.ops.size();
    program.ops.insert(program.ops.end(), during.begin(), during.end());
    x.ops_split = program.ops.size();
    program.ops.insert(program.ops.end(), after.begin(), after.end());
    x.ops_end = program.ops.size();
    x.sends_end = program.sends.size();
    x.receives_end = program.receives.size();
    program.exchanges.push_back(x);
    ++st.rounds;
  }
  if (!host && std::any_of(program.exchanges.begin(), program.exchanges.end(),
                           [](const TransferProgram::Exchange& x) { return x.prefetched; })) {
    const int gpu = comm.device().index;
    SDRT_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(gpu));
    SDRT_ASSIGN_OR_RETURN(CudaEvent bucket_free, CudaEvent::Create(gpu, EventTiming::kDisabled));
    SDRT_ASSIGN_OR_RETURN(CudaEvent packed, CudaEvent::Create(gpu, EventTiming::kDisabled));
    program.pack_stream = std::make_shared<TransferProgram::PackStream>(
        TransferProgram::PackStream{std::move(stream), std::move(bucket_free), std::move(packed)});
  }
  SDRT_RETURN_IF_ERROR(CompileCollectives(plan, schedule, comm, sources, destinations, program));
  return program;
}

}  // namespace sdrt::internal
