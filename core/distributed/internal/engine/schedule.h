// Running a reshard plan (plan.h) on one rank of a communicator that spans both
// sides (issue 14, the executor). The rank's messages are cut into chunks of at most one
// bucket and put in the exchange order (tensors, or parts of a tensor by receiver, as
// OrderExchanges orders them (exchange_order.h), then contribution, source rank, destination
// rank, chunk), which every rank derives alike. The chunks
// between one pair of ranks are joined into units, one wire message each (many small tensors cost
// one message per peer and bucket, not one per tensor); units keep the order of their first chunk.
// A large chunk whose box is one dense range of its local travels from and into the locals, not
// through the buckets. The plan's tensors are cut into exchange groups in which no rank
// sends or receives more than a bucket (OrderExchanges), the same on every rank. Each
// exchange (one Communicator::Exchange: MPI_Isend/Irecv, or ncclSend/ncclRecv in one
// group) takes the rank's next units of one exchange group in that order, sends and
// receives alike, while neither side passes a bucket (the group's units in rounds: the
// first unit of every pair, then every second, so that a rank sends and receives at once;
// not for a group with Partial contributions, whose order a receiver keeps), packed into
// and unpacked from the rank's buckets, so that both sides of a message make it in the same
// group's exchange (a schedule cut by each rank's own bytes alone lets a rank wait on a peer still
// busy with earlier tensors, and those waits chain across the world: sync_cost.h); a
// chunk to itself is copied without the wire: local to local while the exchange's messages
// move, or through the send bucket after them at its place in the order
// (program.h).
// Fan-out forwards (plan.h) come after every direct chunk, in exchanges of their
// own: a relay sends what it has received. No rank waits on another's schedule:
// everything before the earliest unit not yet delivered has been delivered, so that unit
// is in the current exchange of its sender and of its receiver, and every exchange
// completes. Peak extra memory per rank: a receive bucket and one send bucket, or two when
// it packs for more than one exchange (program.h; each at most bucket_bytes, or one row of
// a box when a row is larger), whatever the size of the largest tensor. Not
// public API.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/internal/engine/exchange_order.h"
#include "sdrt/core/distributed/internal/engine/pack.h"
#include "sdrt/core/distributed/internal/engine/plan_types.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// Where a program is compiled for: this rank, the number of ranks of its communicator and
// the device of its buckets (the communicator's). A communicator gives all three; a call
// that moves nothing between ranks (DistributeStateDict without one) names them itself.
class TransferSite {
 public:
  TransferSite(int64_t rank, int64_t size, Device device)
      : rank_(rank), size_(size), device_(device) {}
  TransferSite(const Communicator& comm)  // NOLINT(runtime/explicit): a communicator is one
      : rank_(comm.rank()), size_(comm.size()), device_(comm.device()) {}
  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }
  Device device() const { return device_; }

 private:
  int64_t rank_;
  int64_t size_;
  Device device_;
};

struct TransferScheduleOptions {
  // The most bytes one rank sends (or receives) in one exchange; >= 64.
  int64_t bucket_bytes = int64_t{256} << 20;
  // Where every chunk starts inside its unit and every unit inside a bucket: on a multiple
  // of this many bytes (a power of two, 1 to 256). 1 packs chunks back to back (host
  // buckets: nothing gained by padding); a device communicator asks for
  // kDeviceChunkAlignment so that every packing copy and kernel starts on 16 bytes. The
  // padding between a unit's chunks travels on the wire and counts in its bytes.
  int64_t chunk_alignment = 1;
  // OrderExchanges(plan, bucket_bytes) when the caller has it (a simulator scheduling
  // every rank of one plan); null: ScheduleTransfer works it out.
  const ExchangeOrder* exchange_order = nullptr;
};

// The chunk alignment of device buckets (TransferScheduleOptions::chunk_alignment).
inline constexpr int64_t kDeviceChunkAlignment = 16;

// `bytes` rounded up to a multiple of `alignment` (a power of two).
inline int64_t AlignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

// One rank's chunks and exchanges: a value, derived once per (plan, rank, bucket_bytes).
struct TransferSchedule {
  // One chunk: message `chunk` (a piece of one of the plan's messages) of plan tensor
  // `tensor`.
  struct Step {
    size_t tensor = 0;
    const TransferMessage* chunk = nullptr;
  };
  // One wire message (or one chunk to itself): steps [first, first + count), all from
  // source_rank to destination_rank, each starting on `chunk_alignment` bytes after the end
  // of the one before, `bytes` in all (the padding between them included).
  struct Unit {
    size_t first = 0;
    size_t count = 0;
    int64_t bytes = 0;
    int64_t source_rank = 0;
    int64_t destination_rank = 0;
  };
  int64_t rank = 0;
  int64_t chunk_alignment = 1;  // TransferScheduleOptions'
  // Per plan tensor, its chunks that this rank sends or receives (shared by the tensors
  // of one layout plan); the steps point into them.
  std::vector<std::shared_ptr<const std::vector<TransferMessage>>> chunks;
  // This rank's chunks, unit by unit: sends to other ranks, receives from other ranks,
  // and chunks to itself.
  std::vector<Step> steps;
  // This rank's units in the order of their first chunk in the exchange order.
  std::vector<Unit> units;
  // Units [0, local_units): a rank's direct chunks when every one of them goes to itself,
  // copied without an exchange (then it has no direct exchange of its own).
  size_t local_units = 0;
  // Exchange i takes units [begin[i], begin[i + 1]); exchanges() + 1 entries. The first
  // direct_exchanges hold the direct chunks, the others the forwards.
  std::vector<size_t> begin;
  size_t direct_exchanges = 0;
  // The collective exchanges, after the point-to-point ones, the same on every rank: one
  // broadcast or all-gather each, of steps [first, first + count) (after the units'
  // steps). A broadcast's chunks lie back to back in its bucket, each at `offsets[i]`
  // (16-byte aligned), `bytes` in all. An all-gather's bucket holds every rank's segment
  // in rank order, rank q's `counts[q]` bytes, its chunks each at `offsets[i]` from the
  // start of its sender's segment (16-byte aligned); `bytes` is the sum of the counts.
  struct CollectiveExchange {
    Collective kind = Collective::kBroadcast;
    int64_t root = 0;
    size_t first = 0;
    size_t count = 0;
    std::vector<int64_t> offsets;
    std::vector<int64_t> counts;
    int64_t bytes = 0;
  };
  std::vector<CollectiveExchange> collectives;
  int64_t send_bucket_bytes = 0;     // the largest exchange's sends, or self chunk
  int64_t receive_bucket_bytes = 0;  // the largest exchange's receives from other ranks
  // Point-to-point exchanges (direct and forward); the collective ones come after them.
  size_t exchanges() const { return begin.empty() ? 0 : begin.size() - 1; }
};

// One side's local tensors of every plan tensor on this rank, by pointer, back to back in
// one vector (no copy of a tensor, no allocation per tensor): plan tensor t's are
// tensors[begin[t], begin[t + 1]), indexed by TransferPiece::local (a null tensor: none);
// none when the rank holds no piece of it. The tensors pointed to outlive the
// TransferLocals; `owned` holds those made for it (fresh destination locals) and, for a
// binding, the handles it keeps of the caller's locals. `checked`:
// every ref needed was checked against its piece and made by CheckedRef (the state-dict
// path does so before its agreement); else CompileTransfer checks them (program.h).
struct TransferLocals {
  std::vector<LocalRef> tensors;
  std::vector<size_t> begin{0};
  std::deque<Tensor> owned;
  bool checked = false;
  // Sources only: per plan tensor, the scales its FP8 codes are made with (none: empty, or
  // an entry without scales).
  std::vector<BoxScales> scales;
  const BoxScales* scales_of(size_t t) const {
    return t < scales.size() && scales[t].scales != nullptr ? &scales[t] : nullptr;
  }
  size_t size() const { return begin.size() - 1; }
  LocalRefs of(size_t t) const {
    return LocalRefs(tensors.data() + begin[t], begin[t + 1] - begin[t]);
  }
  // Appends the next plan tensor's locals, unchecked: refs of `locals`, which the caller
  // keeps.
  void Add(absl::Span<const Tensor> locals) {
    for (const Tensor& local : locals) tensors.push_back({&local, nullptr});
    begin.push_back(tensors.size());
  }
};

// How many exchanges every rank makes in each phase: the most of any rank's schedule.
struct ExchangeCounts {
  int64_t direct = 0;
  int64_t forward = 0;
};

// What one rank does in each run of its compiled program (CompileTransfer, program.h).
struct TransferRunStats {
  int64_t rounds = 0;          // Exchange calls
  int64_t sent_bytes = 0;      // to other ranks
  int64_t received_bytes = 0;  // from other ranks
  int64_t self_bytes = 0;      // copied from this rank's sources to its destinations
  int64_t buffer_bytes = 0;    // the send and receive buckets, allocated once
  int64_t direct_bytes = 0;    // of sent and received, straight from or into a local
};

// Cuts every message of `plan` that global rank `rank` sends or receives so that no chunk
// holds more than options.bucket_bytes (a box is cut along its first dim of extent > 1
// into whole rows, whole bytes for sub-byte dtypes; a row larger than a bucket along its
// next dim; one element or one whole-byte group is never cut) and lists the rank's chunks
// in the exchange order (OrderExchanges; collective tensors in plan order). Chunks
// between one pair of ranks travel as one wire message (a unit)
// while it stays within a bucket: a chunk joins the pair's open unit of its phase, which
// moves it earlier (never later) in the order; a later Partial contribution, a chunk to
// itself and a chunk of kDirectRangeBytes or more (sent from and received into its locals
// where they are dense, pack.h) are units of their own. Every rank derives a pair's units
// alike, from the exchange order of that pair's chunks, so sender and receiver agree on
// every message. No unit joins chunks of two exchange groups, and each group opens a new
// exchange of each phase on every rank that has units in it: a rank's messages
// of a group are in that group's exchange on both sides, so that no exchange waits for a
// peer still busy with earlier groups. Within a group, consecutive units share an exchange
// while neither side passes a bucket (only a rank whose one item of the group is larger
// than a bucket, or the chunk alignment's padding, passes it; a unit larger than a bucket travels
// in an exchange of its own). The messages of collective layouts (to kEveryRank) are every rank's,
// in the collective exchanges: a broadcast's chunks cut as above, consecutive chunks of one root
// sharing an exchange within a bucket; an all-gather's messages whole, consecutive all-gathered
// tensors sharing an exchange while every rank's segments together stay within a bucket (a tensor
// larger than a bucket is gathered in an exchange of its own). Units lie in a bucket one after
// another, each on chunk_alignment bytes. InvalidArgument for bucket_bytes < 64, a chunk_alignment
// that is not a power of two in [1, 256], a negative rank, a plan of another rank
// (TransferPlan::rank), or more than 2^22 chunks.
absl::StatusOr<TransferSchedule> ScheduleTransfer(const TransferPlan& plan, int64_t rank,
                                                  const TransferScheduleOptions& options);

// The exchanges of `schedule` in which its rank sends or copies to itself.
int64_t SendingExchanges(const TransferSchedule& schedule);

// Whether exchange `e` of a rank's run is packed while the exchange before it moves, into
// the other of two send buckets (program.h; the sync model runs the same): the rank sends in
// more than one exchange (`sending`, SendingExchanges), and `e` is neither the first nor
// `first_forward`, the first exchange of forwards, which forwards what the ones before it
// received.
inline bool PackedAhead(int64_t e, int64_t first_forward, int64_t sending) {
  return sending > 1 && e > 0 && e != first_forward;
}

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_ENGINE_SCHEDULE_H_
