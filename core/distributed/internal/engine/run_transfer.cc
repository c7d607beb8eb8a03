// RunTransfer (program.h): the walk over a compiled program, its copies and its exchanges.
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/program.h"
#include "sdrt/core/distributed/internal/engine/self_copy.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// The collective of exchange `x`, on views of the program's buckets.
absl::Status RunCollective(const TransferProgram& program, const TransferProgram::Exchange& x,
                           Communicator& comm) {
  if (x.kind == Collective::kBroadcast) {
    SDRT_ASSIGN_OR_RETURN(
        Tensor bytes,
        Tensor::AtByteOffset(x.root == comm.rank() ? program.send_bucket : program.receive_bucket,
                             0, DType::kUInt8, {x.bytes}));
    return comm.Broadcast(absl::MakeSpan(&bytes, 1), x.root);
  }
  const absl::Span<const int64_t> counts(program.counts.data() + x.counts_begin,
                                         static_cast<size_t>(comm.size()));
  SDRT_ASSIGN_OR_RETURN(Tensor gathered,
                        Tensor::AtByteOffset(program.receive_bucket, 0, DType::kUInt8, {x.bytes}));
  SDRT_ASSIGN_OR_RETURN(
      const Tensor mine,
      Tensor::AtByteOffset(program.send_bucket, 0, DType::kUInt8, {counts[comm.rank()]}));
  return comm.AllGatherV(gathered, mine, counts);
}

// Keeps the buckets of a program whose exchange failed for the rest of the process: the
// messages of an exchange given up may still be served to a late peer, and a device
// communicator aborted its collective, whose kernels may still touch them (freeing device
// memory waits for the device's streams). Reachable from a
// static, so leak checkers count them as still reachable.
void KeepBuckets(const TransferProgram& program) {
  static auto* mutex = new std::mutex();
  static auto* kept = new std::vector<std::shared_ptr<Storage>>();
  const std::lock_guard<std::mutex> lock(*mutex);
  for (const std::shared_ptr<Storage>* bucket : {&program.send_bucket, &program.receive_bucket}) {
    if (*bucket != nullptr) kept->push_back(*bucket);
  }
}

// Runs ops [begin, end) of `program`: on `stream` without waiting when `device` (program.h).
absl::Status RunOps(const TransferProgram& program, const TransferPlan& plan,
                    const TransferSchedule& schedule, const TransferLocals& sources,
                    const TransferLocals& destinations, bool device, StreamHandle stream,
                    size_t begin, size_t end) {
  using Kind = TransferProgram::Op::Kind;
  for (size_t i = begin; i < end; ++i) {
    const TransferProgram::Op& op = program.ops[i];
    if (op.kind == Kind::kCopy) {
      std::memmove(op.to, op.from, static_cast<size_t>(op.bytes));
      continue;
    }
    const TransferSchedule::Step& step = schedule.steps[op.step];
    const TransferTensorPlan& tp = plan.tensors[step.tensor];
    const LocalRefs from =
        step.chunk->forward ? destinations.of(step.tensor) : sources.of(step.tensor);
    if (op.kind == Kind::kSelfDirect) {
      SDRT_RETURN_IF_ERROR(
          CopyToSelf(tp, *step.chunk, from, destinations.of(step.tensor), device, stream));
      continue;
    }
    if (op.kind == Kind::kPack || op.kind == Kind::kSelf) {
      const BoxScales* const scales =
          step.chunk->forward ? nullptr : sources.scales_of(step.tensor);
      SDRT_RETURN_IF_ERROR(PackMessage(tp, *step.chunk, from, program.send_bucket, op.offset,
                                       device, stream, scales));
    }
    if (op.kind != Kind::kPack) {
      SDRT_RETURN_IF_ERROR(UnpackMessage(
          tp, *step.chunk, op.kind == Kind::kUnpack ? program.receive_bucket : program.send_bucket,
          op.offset, destinations.of(step.tensor), device, stream));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunTransfer(
    const TransferProgram& program, const TransferPlan& plan, const TransferSchedule& schedule,
    Communicator* comm, const TransferLocals& sources, const TransferLocals& destinations,
    const std::function<void(int64_t done_bytes, int64_t total_bytes)>& progress) {
  const size_t n = program.exchanges.size();
  if (n > 0 && comm == nullptr) {
    return absl::InternalError("RunTransfer: exchanges to make and no communicator");
  }
  // A device communicator's steps go on its stream without waiting (program.h), after the
  // work the caller enqueued on the device's legacy default stream before the call.
  const bool device = comm != nullptr && !comm->device().is_cpu();
  const StreamHandle stream = device ? comm->stream() : nullptr;
  // This rank's first error in its own steps. The rank still makes every exchange (with
  // whatever its buckets hold) so that no other rank waits for it until the deadline; the
  // caller's closing then reports the error on every rank.
  // (The caller's writes of the sources and reads of the destinations there come first.)
  absl::Status local = device && stream != nullptr
                           ? WaitForLegacyStream(comm->device().index, stream)
                           : absl::OkStatus();
  const auto run = [&](size_t begin, size_t end) {
    if (local.ok()) {
      local = RunOps(program, plan, schedule, sources, destinations, device, stream, begin, end);
    }
  };
  TransferProgram::PackStream* const packer = program.pack_stream.get();
  if (packer != nullptr && local.ok()) {
    local = WaitForLegacyStream(comm->device().index, packer->stream.handle());
  }
  // Exchange `next`'s packing, while the exchange before it moves: on the host in turn with
  // the overlap work, on a device on the pack stream once the half it packs into is free.
  const auto pack_ahead = [&](const TransferProgram::Exchange& next) {
    if (packer == nullptr) {
      run(next.ops_begin, next.ops_during);
      return;
    }
    if (local.ok()) local = packer->bucket_free.Block(packer->stream.handle());
    if (local.ok()) {
      local = RunOps(program, plan, schedule, sources, destinations, device,
                     packer->stream.handle(), next.ops_begin, next.ops_during);
    }
    if (local.ok()) local = packer->packed.Record(packer->stream.handle());
  };
  absl::Status moved;
  run(0, program.local_ops_end);
  const int64_t total = program.stats.sent_bytes + program.stats.received_bytes;
  int64_t done = 0;
  for (size_t i = 0; i < n && moved.ok(); ++i) {
    const TransferProgram::Exchange& x = program.exchanges[i];
    // What the pack stream wrote (this exchange's packing, the chunks to itself copied with
    // it) before anything after it on the communicator's stream reads it.
    if (packer != nullptr && local.ok()) local = packer->packed.Block(stream);
    if (!x.prefetched) run(x.ops_begin, x.ops_during);
    const TransferProgram::Exchange* const next =
        i + 1 < n && program.exchanges[i + 1].prefetched ? &program.exchanges[i + 1] : nullptr;
    if (next != nullptr && packer != nullptr && local.ok()) {
      // The half `next` packs into is free once what is enqueued now (the exchange before
      // this one and its unpacking) has run.
      local = packer->bucket_free.Record(stream);
    }
    if (x.kind != Collective::kNone) {
      moved = RunCollective(program, x, *comm);
    } else {
      const Communicator::LocalWork during = x.ops_split > x.ops_during || next != nullptr
                                                 ? Communicator::LocalWork([&] {
                                                     run(x.ops_during, x.ops_split);
                                                     if (next != nullptr) pack_ahead(*next);
                                                     return absl::OkStatus();
                                                   })
                                                 : nullptr;
      moved = comm->Exchange(
          absl::MakeConstSpan(program.sends.data() + x.sends_begin, x.sends_end - x.sends_begin),
          absl::MakeConstSpan(program.receives.data() + x.receives_begin,
                              x.receives_end - x.receives_begin),
          during);
    }
    if (!moved.ok()) {
      // Which exchange, so that a timeout or a failed rank can be placed in the run.
      moved = absl::Status(moved.code(),
                           absl::StrCat("exchange ", i + 1, " of ", n, " (",
                                        x.kind == Collective::kBroadcast   ? "a broadcast"
                                        : x.kind == Collective::kAllGather ? "an all-gather"
                                                                           : "point to point",
                                        "): ", moved.message()));
      break;
    }
    run(x.ops_split, x.ops_end);
    done += x.moved;
    if (progress && local.ok()) progress(done, total);
  }
  // Whatever the pack stream was given runs before the run's end is waited for.
  if (packer != nullptr) {
    const absl::Status packed = packer->packed.Block(stream);
    if (local.ok()) local = packed;
  }
  const absl::Status status = !moved.ok() ? moved : local;
  if (!device) {
    // An exchange given up (its deadline) leaves its messages posted: a late peer may still
    // read or write the buckets, which stay.
    if (!moved.ok()) KeepBuckets(program);
    return status;
  }
  // Everything the steps enqueued has run before the caller reads (or frees) its locals. A
  // communicator that aborted refuses at once: its buckets stay (KeepBuckets).
  const absl::Status synced = comm->Synchronize();
  if (!synced.ok()) KeepBuckets(program);
  return status.ok() ? synced : status;
}

}  // namespace sdrt::internal
