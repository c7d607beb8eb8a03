// A rank's reshard schedule (schedule.h) worked out against its locals once: every
// exchange's sends and receives as addresses, and every copy before and after it as a
// (from, to, bytes) triple, so that running it again is a walk over flat arrays (no tree, no
// plan entry, no local read per tensor). A one-shot transfer (TransferRun, transfer.h)
// compiles and runs one per call; a bound reshard (BindReshard, reshard_state_dict.h)
// compiles once, holding its locals and its buckets, and runs it every step. Not public
// API.
//
// Each exchange of the schedule becomes: the copies into the send bucket (packing), one
// Communicator::Exchange, during which the chunks to itself that are copied local to local
// are copied (its `overlap` work), then, in unit order, the copies out of the receive bucket
// (unpacking) and the chunks to itself that go through the send bucket. A rank that packs for
// more than one exchange has two send buckets (halves of one allocation, exchange e packing
// into half e % 2) and packs exchange e + 1 while exchange e's messages move (its overlap
// work too): packing overlaps the wire. The one exception is the first exchange of forwards,
// packed from what the exchanges before it received, so only after them. A chunk's boxes are copies
// when every box is one dense range of a checked contiguous CPU local (ContiguousBoxOffset) and
// nothing is to be reduced; otherwise the chunk stays one step through PackMessage / UnpackMessage
// (any strides, Partial contributions, other devices), at its place in the order.
//
// On a device communicator (NCCL) every step is enqueued on the communicator's stream
// (Communicator::stream) without waiting, after the work the caller enqueued on the device's
// legacy default stream before the run: packing before the exchange's messages, which the
// stream orders after it; unpacking after them; a chunk to itself whose boxes are views of
// locals on the device straight from local to local before the messages (CopyToSelf), else
// through the send bucket after them. A prefetched exchange's packing goes on the program's
// pack stream (TransferProgram::PackStream) while the exchange before it runs on the
// communicator's. The exchange's own wait is the only one per exchange, and one Synchronize
// ends the run. Chunks start on kDeviceChunkAlignment bytes in the
// device buckets (schedule.h).
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PROGRAM_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PROGRAM_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/core/distributed/internal/engine/schedule.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/storage.h"

namespace sdrt::internal {

struct TransferProgram {
  struct Op {
    enum class Kind : uint8_t {
      kCopy,        // memmove `bytes` from `from` to `to`
      kPack,        // PackMessage of schedule step `step` into the send bucket at `offset`
      kUnpack,      // UnpackMessage of step `step` from the receive bucket at `offset`
      kSelf,        // step `step`, a chunk to itself, packed and unpacked through the send bucket
      kSelfDirect,  // step `step`, a chunk to itself, CopyToSelf (self_copy.h): local to
                    // local on the communicator's stream (device communicators)
      kUnpackSent,  // UnpackMessage of step `step` from the send bucket at `offset` (a
                    // broadcast root's own copy of what it sent)
    };
    Kind kind = Kind::kCopy;
    const char* from = nullptr;
    char* to = nullptr;
    int64_t bytes = 0;
    size_t step = 0;
    int64_t offset = 0;
  };
  // Exchange i: ops [ops_begin, ops_during) before it, [ops_during, ops_split) while its
  // messages move, [ops_split, ops_end) after it; its sends [sends_begin, sends_end) and
  // receives likewise.
  // A collective exchange (kind != kNone) has no sends or receives: a broadcast of `bytes`
  // from `root` (the root's send bucket into the others' receive buckets), or an all-gather
  // of every rank's segment (counts[counts_begin + q] bytes from rank q) from the send
  // bucket into the receive bucket; its ops before it pack, after it unpack.
  struct Exchange {
    size_t ops_begin = 0, ops_during = 0, ops_split = 0, ops_end = 0;
    size_t sends_begin = 0, sends_end = 0;
    size_t receives_begin = 0, receives_end = 0;
    Collective kind = Collective::kNone;
    int root = 0;
    int64_t bytes = 0;
    size_t counts_begin = 0;
    int64_t moved = 0;  // this rank's bytes sent and received in it (for progress)
    // Its ops [ops_begin, ops_during) (its packing) run while the exchange before it moves
    // its messages, into the other half of the send bucket.
    bool prefetched = false;
  };
  std::vector<Op> ops;
  size_t local_ops_end = 0;  // ops [0, local_ops_end): the schedule's local units, run first
  std::vector<Communicator::SendMessage> sends;
  std::vector<Communicator::ReceiveMessage> receives;
  std::vector<Exchange> exchanges;  // as many as every rank makes (ExchangeCounts), then the
                                    // schedule's collective ones
  std::vector<int64_t> counts;      // the all-gathers' segment sizes, world_size per exchange
  std::shared_ptr<Storage> send_bucket, receive_bucket;
  // A device program's packing of prefetched exchanges goes on a stream of its own, so that
  // it runs beside the messages on the communicator's stream: `bucket_free` (recorded there
  // before an exchange) holds it back until the half it packs into is free, `packed`
  // (recorded on it) holds the next exchange back until it is packed. Null on the host.
  struct PackStream {
    CudaStream stream;
    CudaEvent bucket_free, packed;
  };
  std::shared_ptr<PackStream> pack_stream;
  TransferRunStats stats;  // what every run does
};

// A transfer is CompileTransfer, then RunTransfer once or every step, collective over
// `comm`, whose ranks are the plan's global ranks: every rank calls both with the same plan
// (or its own plan of one rank), its own schedule (ScheduleTransfer for comm.rank()) and the
// same `exchanges`, in each phase at least the most of any rank's schedule (a rank with fewer
// exchanges makes empty ones, so that every rank calls Exchange alike). `sources.of(t)` are
// this rank's source locals of plan tensor t (indexed by TransferPiece::local; empty when it
// holds none; any strides), `destinations.of(t)` its destination locals (allocated, of the
// pieces' shapes and dtype, filled in place; any strides without overlap). Tensors are on
// comm.device() (the CPU for MPI).
//
// CompileTransfer checks every local this rank's pieces need before anything moves (refs not
// yet checked are made checked ones in `sources` and `destinations`; the caller agrees on
// such errors across ranks first: one rank returning early leaves the others waiting until
// the deadline), allocates the buckets on comm.device() and works out every exchange.
// InvalidArgument when sources or destinations have a size other than plan.tensors.size(),
// when a local needed is missing or of the wrong dtype or shape (PackMessage's errors), when
// the schedule is not comm.rank()'s or has more exchanges than `exchanges`, or comm.size() is
// not larger than every rank of the schedule; ResourceExhausted when a bucket cannot be
// allocated; CUDA's errors making a device program's pack stream; Unimplemented, on every rank
// alike, when the buckets are off the CPU and a tensor of the plan has Partial contributions to
// reduce at its receivers (UnpackMessage reduces from CPU buffers only); Internal for a schedule
// whose units overrun its buckets. The program points into the plan, the schedule, the locals'
// memory and the refs of `sources` and `destinations`: all must outlive it, unchanged.
absl::StatusOr<TransferProgram> CompileTransfer(const TransferPlan& plan,
                                                const TransferSchedule& schedule,
                                                ExchangeCounts exchanges, const TransferSite& comm,
                                                TransferLocals& sources,
                                                TransferLocals& destinations);

// Runs `program` (CompileTransfer of the same plan, schedule, comm and locals): collective
// over comm, every rank running its own program of the same plan. On return every
// destination local holds its piece (on a device communicator: the stream has run every
// copy, also on error, unless the communicator aborted: then the buckets are kept for the
// rest of the process, since an aborted collective's kernels may still touch them). A rank
// whose own step fails (PackMessage's, UnpackMessage's, CopyToSelf's errors) skips its
// other steps but still makes every exchange, so that the other ranks are not left waiting
// for it, and returns that error after them (the caller's closing agrees on it). Errors: the
// communicator's (DeadlineExceeded names the missing ranks; the run stops there), those of
// the steps, CUDA's for the wait on the legacy default stream.
// `progress`, when given, is called after each exchange with this rank's bytes sent and
// received so far and in all.
absl::Status RunTransfer(
    const TransferProgram& program, const TransferPlan& plan, const TransferSchedule& schedule,
    Communicator* comm, const TransferLocals& sources, const TransferLocals& destinations,
    const std::function<void(int64_t done_bytes, int64_t total_bytes)>& progress = nullptr);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_PROGRAM_H_
