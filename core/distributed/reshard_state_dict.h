// Reshard: any layout to any layout, peer to peer (issue 14). A trainer's state dict held
// as FSDP (or FSDP+TP) shards on some ranks goes to an inference engine's layout (TP, TP x
// PP) on the same or other ranks, or a checkpoint saved by 8 ranks as fsdp becomes 4 ranks
// of tp, without a funnel through one rank: every byte a destination rank needs and does
// not hold moves once, from a rank that holds it, and a piece held by several ranks
// (Replicate) is sent by all of them in equal shares. PyTorch's counterpart is
// DTensor.redistribute (one mesh only; across meshes it raises NotImplementedError).
//
//   ReshardOptions options;
//   options.comm = &world;                        // spans every rank of both sides
//   ReshardPlan plan = *PlanReshard(trainer, engine, options);   // once
//   for (step...) ExecuteReshard(plan, trainer, engine);          // every RL step
//
// or, when both sides keep their buffers from step to step (the weight sync of an RL
// trainer into an engine's weights), bound to them once:
//
//   BoundReshard sync = *BindReshard(plan, trainer, engine);     // once
//   for (step...) sync.Execute();                                 // every RL step
//
// Both calls are collective over options.comm: every rank calls them, with what it holds
// on each side (either may be empty). The ranks of the meshes and of the ShardedTensor
// metadata are ranks of options.comm.
#ifndef SDRT_CORE_DISTRIBUTED_RESHARD_STATE_DICT_H_
#define SDRT_CORE_DISTRIBUTED_RESHARD_STATE_DICT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/transfer_stats.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/export.h"

namespace sdrt SDRT_API {

struct ReshardOptions {
  Communicator* comm = nullptr;  // required; CPU tensors with MPI, CUDA ones with NCCL
  // The most bytes a rank sends, or receives, in one exchange: the peak extra memory per rank
  // is three such buckets (two send buckets, so that the next exchange is packed while this
  // one's messages move, and a receive bucket; two in all when a rank sends in only one
  // exchange), whatever the size of the largest tensor. >= 64.
  int64_t bucket_bytes = int64_t{256} << 20;
  // Which ranks of comm share a node, for the fan-out: a piece that several destination
  // ranks of one node need and no rank there holds is sent to that node once and forwarded
  // there (not for Partial sources). Empty: ranks with the same host name (gethostname)
  // share a node. Else one entry per rank of comm, equal values sharing a node; every rank
  // passes the same (compared in the agreement).
  std::vector<int64_t> node_of_rank;
  // How the destination's tensors are made from the source's (weight_map.h): renamed,
  // fused, split, padded. Empty (the default): leaves are matched by path. Every rank
  // passes the same map (compared in the agreement). FP8 destinations with scales
  // (weight_map.h) are quantized by the senders with or without a map: one all-reduce of
  // block amaxes per execution, codes on the wire.
  WeightMap weight_map;
  // Called on the calling thread after each exchange of every execution of the plan
  // (ExecuteReshard, ReshardStateDict, each BoundReshard::Execute) with this rank's bytes
  // sent and received so far in that execution and in all of it, e.g. to show progress.
  // Kept by the plan (copied; what it captures must outlive the plan and its bindings).
  // Not compared across ranks. May be empty.
  std::function<void(int64_t done_bytes, int64_t total_bytes)> progress;
};

class BoundReshard;

// A planned tensor whose dtype changes on the way (a cast, or FP8 codes made with scales):
// `path` is its plan path (with a weight map, the source tensor's name), and `by_senders`
// says where the conversion runs: on the senders (the wire carries `destination`'s dtype,
// the narrower) or on the receivers after the move (the wire carries `source`'s).
struct PlannedCast {
  std::string path;
  DType source = DType::kFloat32;
  DType destination = DType::kFloat32;
  bool by_senders = false;
};

// The plan of one (source layout, destination layout) pair: a value to keep and execute
// again while the layouts stay the same. Copies share it. A default-constructed plan is
// empty: no paths, zero stats, no casts; ExecuteReshard and BindReshard refuse it
// (FailedPrecondition).
class ReshardPlan {
 public:
  // The paths planned (leaves some rank holds on the destination side), in plan order.
  const std::vector<std::string>& paths() const;
  // The plan's figures (transfer_stats.h; `collectives`: those of PlanReshard).
  const TransferStats& stats() const;
  // Per planned tensor whose dtype changes, which side converts it (TransferStats's
  // cast_by_senders / cast_by_receivers, tensor by tensor), in plan order.
  const std::vector<PlannedCast>& casts() const;

  struct State;

 private:
  friend absl::StatusOr<ReshardPlan> PlanReshard(const Map&, const Map&, const ReshardOptions&);
  friend absl::Status ExecuteReshard(const ReshardPlan&, const Map&, Map&, TransferStats*);
  friend class BoundReshard;
  friend absl::StatusOr<BoundReshard> BindReshard(const ReshardPlan&, const Map&, Map&);
  std::shared_ptr<const State> state_;
};

// Plans the reshard from `source` (this rank's sharded state dict: DTensors on mesh A,
// ShardedTensors, plain tensors it holds whole, which count as replicated over the ranks
// holding them) into `destination` (this rank's target layout: DTensors on mesh B whose
// locals are meta or allocated, ShardedTensors, plain tensors to be replaced by the full
// tensor). Leaves are matched by their dotted paths; source leaves no rank wants are left
// out. One exchange of compact descriptors (per leaf: dtype, global shape, mesh and
// placements or boxes; never per-element lists), inside the agreement, so every rank
// builds the same plan or gets the same error. A destination DTensor or ShardedTensor of
// another float dtype than its source (bfloat16, float16, float32, float64, float8 e4m3fn /
// e5m2 / e8m0fnu; tensor/dtype.h's cast column) is a cast: every element converted as PyTorch's
// `Tensor.to(dtype)` does (rounding to nearest even; float8_e4m3fn saturating at 448), on
// the side of the wider dtype, so the wire carries the narrower one (on a device
// communicator by a CUDA kernel, converting between the locals and the device buckets); not
// from a Partial source. InvalidArgument naming the leaf when ranks describe one side of it
// differently, source and destination
// differ in shape or in dtype (other than such a cast), no rank holds a source of a
// destination leaf, a destination is Partial (PyTorch gives
// each rank a share of the value; sdrt refuses), or a layout is invalid (the planner's
// errors, internal/engine/plan.h; among them a Partial(avg) source of a non-floating dtype,
// which PyTorch refuses too); Unimplemented for Partial dims of different ops (sum, product,
// min, max and avg are reduced on the receiving rank, every contribution's bytes counted
// as wire bytes; avg is the sum divided by the number of contributions, in the dtype, with
// the last contribution); FailedPrecondition without options.comm; the communicator's
// errors. A tensor that every rank of the communicator needs whole moves by a broadcast (when
// one rank holds it) or, on a device communicator, an all-gather; everything else point to
// point (internal/engine/transfer.h). Collectives: the agreement and one exchange of the
// ranks' exchange counts.
absl::StatusOr<ReshardPlan> PlanReshard(const Map& source, const Map& destination,
                                        const ReshardOptions& options);

// Runs `plan` (made by PlanReshard on every rank with the same options): afterwards every
// destination leaf of this rank holds its piece. A DTensor with a meta local gets a fresh
// compact local on the communicator's device; an allocated DTensor local and ShardedTensor
// shards are written in place (any strides; they must not share memory with the source's
// locals); a plain leaf is replaced by the full tensor. The source leaves must have the
// shapes the plan was made for. One agreement first (a rank whose leaves do not fit the plan
// fails with every rank, InvalidArgument naming the leaf; so do ResourceExhausted for the
// buckets and Unimplemented for a Partial contribution to be reduced from a bucket off the
// CPU), then the exchanges, then the closing: one all-reduce of every rank's status, so
// that the call succeeds on every rank or fails on every rank (the first failing rank's
// error; DeadlineExceeded naming the ranks that did not arrive). `stats`, when not null,
// gets the plan's and this rank's figures (collectives: 1 + exchanges + 1).
//
// On a device communicator (NCCL) the copies run on the communicator's stream
// (Communicator::stream), ordered with its messages, after the work the caller enqueued on
// the device's legacy default stream before the call (PyTorch's default stream: its writes
// of the sources and reads of the destinations), and the call returns once that stream has
// run them, the destination locals ready. Work on the caller's non-blocking streams is not
// waited for: synchronize it first. Chunks of a rank to itself whose locals are on the
// device are copied local to local there.
//
// Cost per call (a weight sync runs it every step): no planning; each leaf is found and
// checked once (by position when the trees list the plan's paths in its order); the small
// pieces between two ranks travel as one message per bucket; a piece of 64 KiB or more goes
// on the wire straight from a contiguous CPU source local and into a contiguous CPU
// destination local; other boxes are copied through the buckets. About 0.15-0.35 us per
// tensor on 2 CPU ranks (bench/RESULTS.md, the planned rows); keep locals contiguous to stay
// on the memcpy path. When both sides keep their buffers, BindReshard (below) does this
// per-tensor work once.
absl::Status ExecuteReshard(const ReshardPlan& plan, const Map& source, Map& destination,
                            TransferStats* stats = nullptr);

// A plan bound to the locals of one source and one destination state dict: ExecuteReshard
// with everything that does not change between steps done once. It holds the locals'
// tensors (sharing their memory, which stays alive while the binding does), the plan, and
// buckets (the peak extra memory of ExecuteReshard, held for the binding's lifetime),
// and has worked out every copy and wire message as addresses. Each Execute moves the bytes
// the bound source locals hold at that moment into the bound destination locals: a trainer
// that updates its parameters in place and an engine that keeps its weight buffers sync
// with one call per step. It sees the memory bound, not later changes to the state dicts:
// a leaf replaced by another tensor (a new allocation, a reloaded checkpoint) needs a new
// binding. The plan's communicator must outlive it. Move-only; one Execute at a time. No
// PyTorch counterpart (DTensor.redistribute plans and allocates on every call).
class BoundReshard {
 public:
  BoundReshard(BoundReshard&&) noexcept;
  BoundReshard& operator=(BoundReshard&&) noexcept;
  ~BoundReshard();

  // Collective over the plan's communicator: every rank calls it, on its binding of the
  // same plan, as many times. No agreement first (the locals were checked and agreed on
  // when bound): a call is the plan's exchanges, the copies into and out of the buckets and
  // the copies of chunks to itself, then the closing: one all-reduce of every rank's status.
  // So a step succeeds on every rank or on none: a rank that does not call leaves every
  // other rank failing with DeadlineExceeded (naming it) at the communicator's deadline,
  // also the ranks whose messages to it were small enough to be sent before it arrived and
  // those that exchange nothing with it; and no rank starts the next step's exchanges
  // before every rank has finished this one's, so a late rank never takes another step's
  // bytes. Steps are counted by calls: a rank's n-th Execute is every rank's n-th (a rank
  // that skips a step and calls again before the deadline pairs its next call with the
  // others' skipped one; nothing here can tell a skip from lateness). Blocking; CPU locals
  // through MPI, CUDA locals through NCCL (the copies of a step on the communicator's
  // stream, as in ExecuteReshard). `stats`, when not null, gets
  // the plan's figures and this rank's (on success; collectives: the exchanges + 1, the
  // same on every rank). Errors: the communicator's; a failed rank's error on every rank;
  // FailedPrecondition on a moved-from binding.
  absl::Status Execute(TransferStats* stats = nullptr);

  // The plan bound (sharing it); not on a moved-from binding.
  const ReshardPlan& plan() const;

  struct State;

 private:
  friend absl::StatusOr<BoundReshard> BindReshard(const ReshardPlan&, const Map&, Map&);
  explicit BoundReshard(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Binds `plan` to this rank's `source` and `destination` (the layouts it was made for, as
// ExecuteReshard takes them): collective over the plan's communicator, one agreement. Every
// local is found and checked as ExecuteReshard does; a DTensor with a meta local gets a
// fresh compact local and a plain destination leaf becomes a new full tensor, put into
// `destination` here (their bytes are undefined until the first Execute). The rows a weight
// map's pad adds (a padded vocabulary) are zeroed here, once: each Execute writes only the
// source's elements, as an engine's own weight update does. The binding keeps
// handles of every local (and of those new ones) and the buckets; the state dicts may be
// dropped afterwards. Cost: ExecuteReshard's per-tensor work, once. Errors, the same on
// every rank (agreed): ExecuteReshard's (InvalidArgument naming a leaf that does not fit
// the plan), ResourceExhausted when the buckets cannot be allocated, Unimplemented for a
// Partial contribution to be reduced from a bucket off the CPU (a CUDA reshard of Partial
// sources), FailedPrecondition for an empty plan.
absl::StatusOr<BoundReshard> BindReshard(const ReshardPlan& plan, const Map& source,
                                         Map& destination);

// PlanReshard then ExecuteReshard.
absl::Status ReshardStateDict(const Map& source, Map& destination, const ReshardOptions& options,
                              TransferStats* stats = nullptr);

}  // namespace sdrt

#endif  // SDRT_CORE_DISTRIBUTED_RESHARD_STATE_DICT_H_
