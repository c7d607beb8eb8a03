#include "sdrt/core/distributed/internal/reshard_program.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/reshard_pack.h"
#include "sdrt/tensor/backend/device_backend.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// Memory of `bytes` bytes on `device` for a bucket.
absl::StatusOr<std::shared_ptr<Storage>> Bucket(Device device, int64_t bytes) {
  if (device.is_cpu()) return Storage::AllocateCpu(bytes);
  SDRT_ASSIGN_OR_RETURN(DeviceBackend* const backend, GetDeviceBackend(device.type));
  return backend->Allocate(bytes, device);
}

// Every local this rank's pieces need, checked against its piece, and its ref made a
// checked one (unless the caller did so).
absl::Status CheckLocals(const ReshardPlan& plan, Communicator& comm, ReshardLocals& sources,
                         ReshardLocals& destinations) {
  const int64_t me = comm.rank();
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
  return absl::OkStatus();
}

// Appends `copies` to `ops` as copy ops.
void AppendCopies(const std::vector<BoxCopy>& copies, std::vector<ReshardProgram::Op>& ops) {
  for (const BoxCopy& c : copies) {
    ReshardProgram::Op op;
    op.from = c.from;
    op.to = c.to;
    op.bytes = c.bytes;
    ops.push_back(op);
  }
}

// A step that goes through PackMessage / UnpackMessage.
void AppendStep(ReshardProgram::Op::Kind kind, size_t step, int64_t offset,
                std::vector<ReshardProgram::Op>& ops) {
  ReshardProgram::Op op;
  op.kind = kind;
  op.step = step;
  op.offset = offset;
  ops.push_back(op);
}

}  // namespace

absl::StatusOr<ReshardProgram> CompileReshard(const ReshardPlan& plan,
                                              const ReshardSchedule& schedule,
                                              ReshardExchangeCounts exchanges, Communicator& comm,
                                              ReshardLocals& sources, ReshardLocals& destinations) {
  using Kind = ReshardProgram::Op::Kind;
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
  SDRT_RETURN_IF_ERROR(CheckLocals(plan, comm, sources, destinations));
  for (const ReshardSchedule::Step& step : schedule.steps) {
    const ReshardMessage& c = *step.chunk;
    if (c.source_rank >= comm.size() || c.destination_rank >= comm.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ExecuteReshard: the plan moves bytes from rank ", c.source_rank, " to rank ",
          c.destination_rank, "; the communicator has ", comm.size(), " ranks"));
    }
  }
  ReshardProgram program;
  SDRT_ASSIGN_OR_RETURN(program.send_bucket, Bucket(comm.device(), schedule.send_bucket_bytes));
  SDRT_ASSIGN_OR_RETURN(program.receive_bucket,
                        Bucket(comm.device(), schedule.receive_bucket_bytes));
  ReshardExecuteStats& st = program.stats;
  st.buffer_bytes = schedule.send_bucket_bytes + schedule.receive_bucket_bytes;
  const bool host = comm.device().is_cpu();
  // The buckets' memory (a device's off the CPU: then only the wire writes and reads there).
  char* const send_base = static_cast<char*>(program.send_bucket->data());
  char* const receive_base = static_cast<char*>(program.receive_bucket->data());
  // The source locals of a chunk: a forward's are the relay's destination locals.
  auto from = [&](const ReshardSchedule::Step& step) {
    return step.chunk->forward ? destinations.of(step.tensor) : sources.of(step.tensor);
  };
  std::vector<BoxCopy> copies;
  // An exchange's ops while its messages move and after it (packing goes straight into
  // program.ops, before them). After it, in unit order: unpacking (a later Partial
  // contribution is reduced into what an earlier one wrote) and the chunks to itself that go
  // through the send bucket, free by then. The chunks to itself copied local to local are
  // copied while the messages move: that moves a contribution-0 chunk earlier, which its
  // elements allow (no message of this exchange writes them, every element of a destination
  // piece coming from one source, and later contributions are reduced into them after it).
  std::vector<ReshardProgram::Op> during, after;
  program.ops.reserve(schedule.steps.size());
  for (int64_t e = 0; e < exchanges.direct + exchanges.forward; ++e) {
    ReshardProgram::Exchange x;
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
      const ReshardSchedule::Unit& u = schedule.units[i];
      const ReshardSchedule::Step& only = schedule.steps[u.first];
      if (u.source_rank == me && u.destination_rank == me) {
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const ReshardSchedule::Step& step = schedule.steps[j];
          copies.clear();
          if (DirectBoxes(plan.tensors[step.tensor], *step.chunk, from(step),
                          destinations.of(step.tensor), copies)) {
            AppendCopies(copies, during);
          } else {
            AppendStep(Kind::kSelf, j, 0, after);
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
          st.direct_bytes += u.bytes;
          continue;
        }
        // The schedule sized the bucket for this exchange; a unit past its end is a bug.
        if (send_at + u.bytes > program.send_bucket->nbytes()) {
          return absl::InternalError(absl::StrCat("ExecuteReshard: a unit of ", u.bytes,
                                                  " bytes at ", send_at,
                                                  " overruns the send bucket"));
        }
        int64_t at = send_at;
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const ReshardSchedule::Step& step = schedule.steps[j];
          copies.clear();
          if (host && BucketBoxes(plan.tensors[step.tensor], *step.chunk, from(step),
                                  send_base + at, /*to_local=*/false, copies)) {
            AppendCopies(copies, program.ops);
          } else {
            AppendStep(Kind::kPack, j, at, program.ops);
          }
          at += step.chunk->bytes;
        }
        program.sends.push_back(
            {static_cast<int>(u.destination_rank), send_base + send_at, u.bytes});
        st.sent_bytes += u.bytes;
        send_at += u.bytes;
      } else if (u.destination_rank == me) {
        st.received_bytes += u.bytes;
        // ... and lands where it belongs.
        if (char* const range = u.count == 1 && host
                                    ? DirectRange(plan.tensors[only.tensor], *only.chunk,
                                                  destinations.of(only.tensor), /*to_local=*/true)
                                    : nullptr) {
          program.receives.push_back({static_cast<int>(u.source_rank), range, u.bytes});
          st.direct_bytes += u.bytes;
          continue;
        }
        if (receive_at + u.bytes > program.receive_bucket->nbytes()) {
          return absl::InternalError(absl::StrCat("ExecuteReshard: a unit of ", u.bytes,
                                                  " bytes at ", receive_at,
                                                  " overruns the receive bucket"));
        }
        program.receives.push_back(
            {static_cast<int>(u.source_rank), receive_base + receive_at, u.bytes});
        for (size_t j = u.first; j < u.first + u.count; ++j) {
          const ReshardSchedule::Step& step = schedule.steps[j];
          const ReshardMessage& c = *step.chunk;
          const ReshardTensorPlan& tp = plan.tensors[step.tensor];
          copies.clear();
          if (host && BucketBoxes(tp, c, destinations.of(step.tensor), receive_base + receive_at,
                                  /*to_local=*/true, copies)) {
            AppendCopies(copies, after);
          } else {
            // Refused here rather than in the middle of a step, where the other ranks would
            // wait for this one until the deadline.
            if (!host && c.contribution > 0) {
              return absl::UnimplementedError(
                  absl::StrCat("reshard of tensor '", tp.name,
                               "': Partial contributions are reduced from CPU "
                               "buffers only"));
            }
            AppendStep(Kind::kUnpack, j, receive_at, after);
          }
          receive_at += c.bytes;
        }
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
  return program;
}

absl::Status RunReshard(const ReshardProgram& program, const ReshardPlan& plan,
                        const ReshardSchedule& schedule, Communicator& comm,
                        const ReshardLocals& sources, const ReshardLocals& destinations) {
  using Kind = ReshardProgram::Op::Kind;
  const auto run = [&](size_t begin, size_t end) -> absl::Status {
    for (size_t i = begin; i < end; ++i) {
      const ReshardProgram::Op& op = program.ops[i];
      if (op.kind == Kind::kCopy) {
        std::memmove(op.to, op.from, static_cast<size_t>(op.bytes));
        continue;
      }
      const ReshardSchedule::Step& step = schedule.steps[op.step];
      const ReshardTensorPlan& tp = plan.tensors[step.tensor];
      const LocalRefs from =
          step.chunk->forward ? destinations.of(step.tensor) : sources.of(step.tensor);
      if (op.kind != Kind::kUnpack) {
        SDRT_RETURN_IF_ERROR(PackMessage(tp, *step.chunk, from, program.send_bucket, op.offset));
      }
      if (op.kind != Kind::kPack) {
        SDRT_RETURN_IF_ERROR(UnpackMessage(
            tp, *step.chunk, op.kind == Kind::kSelf ? program.send_bucket : program.receive_bucket,
            op.offset, destinations.of(step.tensor)));
      }
    }
    return absl::OkStatus();
  };
  for (const ReshardProgram::Exchange& x : program.exchanges) {
    SDRT_RETURN_IF_ERROR(run(x.ops_begin, x.ops_during));
    const Communicator::LocalWork during =
        x.ops_split > x.ops_during
            ? Communicator::LocalWork([&] { return run(x.ops_during, x.ops_split); })
            : nullptr;
    SDRT_RETURN_IF_ERROR(comm.Exchange(
        absl::MakeConstSpan(program.sends.data() + x.sends_begin, x.sends_end - x.sends_begin),
        absl::MakeConstSpan(program.receives.data() + x.receives_begin,
                            x.receives_end - x.receives_begin),
        during));
    SDRT_RETURN_IF_ERROR(run(x.ops_split, x.ops_end));
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
