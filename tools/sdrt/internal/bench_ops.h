// The rows of `sdrt bench`: each sdrt state-dict call against the plainest way to move the
// same bytes, timed in the same run (bench_timing.h), then every byte checked:
//
//   gather         every rank holds DTensors [Shard(0)] on a 1-D mesh of all ranks (FSDP);
//                  GatherStateDict vs one flat all-gather of the same bytes;
//   gather_r0_off  the same with cpu_offload and ranks_only {0}, vs the same all-gather;
//   broadcast      rank 0 holds the full state dict, every rank meta DTensors [Shard(0)];
//                  BroadcastStateDict vs one MPI_Bcast of the same bytes;
//   distribute     every rank holds the full state dict and meta DTensors;
//                  DistributeStateDict (no collective) vs a memcpy of the rank's bytes;
//   gather_partial every rank holds every tensor whole as a DTensor [Partial(max)] (its bytes
//                  as signed integers of the element's size, so that the max of equal
//                  values is the same bytes); GatherStateDict, whose all-reduces are
//                  bucketed, vs one flat all-reduce (max) of the same bytes
//                  (bench_partial.cc). Not in the default --ops.
//   gather_planned, broadcast_planned, distribute_planned
//                  the same moves as gather, broadcast and distribute by a ReshardPlan
//                  made once (untimed) and ExecuteReshard every call, into DTensors the
//                  caller allocated; the same baselines (bench_planned.cc). Not in the
//                  default --ops.
//   gather_bound, broadcast_bound, distribute_bound
//                  the same moves by the same plan bound once (BindReshard, untimed) to
//                  the same source and destination, BoundReshard::Execute every call (the
//                  weight sync of a trainer and an engine that keep their buffers). Not in
//                  the default --ops.
//   sync_mapped    an fsdp trainer's Llama weights bound to a tp engine's fused buffers
//   sync_fp8       the same into float8_e4m3fn linear weights with their scales
//   sync_regroup   the same from Megatron's fused linear_qkv / linear_fc1 (regroup rules)
//                  through the built-in map vllm-llama, against the same bound sync into
//                  the unmapped tp layout (the baseline column; bench_mapped.cc). Llama
//                  workload only; not in the default --ops.
//   links          the links of `sdrt simulate --cluster`: latency, the bandwidth between
//                  two ranks of a node and of two nodes, the copy bandwidth, by
//                  Communicator::Exchange with every rank at once (bench_links.h). Not in
//                  the default --ops.
//   sync_layout    the workload's weight sync between two parallel layouts (--from, --to),
//                  bound once and executed per call, against one exchange of the same bytes
//                  per rank (bench_layout_sync.cc). Not in the default --ops.
//
// The flat all-gather is MPI_Allgather when every rank sends the same bytes and
// MPI_Iallgatherv + MPI_Wait otherwise, as the MPI communicator does: MPICH's blocking
// MPI_Allgatherv pipelines around its ring in 32 KiB pieces that each wait for a scheduler
// tick when ranks outnumber cores (bench/RESULTS.md). Counts are in a contiguous datatype of
// the largest unit dividing them, so that states of more than 2 GiB fit MPI's int counts.
// After the timed runs every byte of sdrt's last result and of the baseline's buffer is
// compared with the source; #wrong is the differing bytes summed over ranks.
#ifndef SDRT_TOOLS_SDRT_INTERNAL_BENCH_OPS_H_
#define SDRT_TOOLS_SDRT_INTERNAL_BENCH_OPS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/core/distributed/weight_map.h"
#include "sdrt/core/state_dict/state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tools/sdrt/internal/bench_rows.h"
#include "sdrt/tools/sdrt/internal/bench_workloads.h"

namespace sdrt::cli {

class BenchRunner {
 public:
  // The meta template of this rank's DTensors (the sharded ones are made by the first
  // Gather). `world` is the MPI world the sdrt calls run over (its rank and size are this
  // rank and the mesh). Errors: DistributeTensor's (the same on every rank).
  static absl::StatusOr<std::unique_ptr<BenchRunner>> Create(const BenchWorkload& workload,
                                                             Communicator& world,
                                                             const BenchSettings& settings);

  // One row; errors (agreed, the same on every rank): the sdrt call's, ResourceExhausted
  // for a buffer that cannot be had, and InvalidArgument when the flat baseline's counts do
  // not fit MPI's int even in the largest common unit.
  absl::StatusOr<BenchRow> Gather(bool offload_to_rank0);
  absl::StatusOr<BenchRow> Broadcast();
  absl::StatusOr<BenchRow> Distribute();
  // Also InvalidArgument for a dtype of another element size than 1, 2, 4 or 8 bytes.
  absl::StatusOr<BenchRow> GatherPartial();
  // The planned rows (bench_planned.cc): a ReshardPlan made once, ExecuteReshard timed;
  // when `bound`, the bound rows: the plan bound once too, BoundReshard::Execute timed.
  absl::StatusOr<BenchRow> GatherPlanned(bool bound);
  absl::StatusOr<BenchRow> BroadcastPlanned(bool bound);
  absl::StatusOr<BenchRow> DistributePlanned(bool bound);
  // The mapped row (bench_mapped.cc): a bound sync through the vllm-llama map against the
  // same sync unmapped; InvalidArgument for a workload without Llama names.
  absl::StatusOr<BenchRow> SyncMapped();
  absl::StatusOr<BenchRow> SyncFp8();
  // A Megatron-fused trainer into the same buffers by regroup rules (bench_regroup.cc).
  absl::StatusOr<BenchRow> SyncRegroup();
  // A bound sync between settings.from_layout and to_layout (bench_layout_sync.cc); also
  // InvalidArgument for layouts that cannot place the workload's tensors.
  absl::StatusOr<BenchRow> SyncLayout();
  // What the mapped rows share (bench_mapped.cc).
  struct MappedSync;
  absl::StatusOr<MappedSync> PrepareMappedSync(const std::string& op);
  absl::StatusOr<BoundReshard> BindSync(Map& engine, const WeightMap* map);
  // `timed` against `baseline` (bound syncs, each executed per call) into row.times and
  // row.stats (`timed`'s; `baseline_stats`, when not null, the baseline's).
  absl::Status TimeSyncs(BoundReshard& timed, BoundReshard& baseline, BenchRow& row,
                         TransferStats* baseline_stats);
  // This rank's bytes of `engine` (m's mapped tensors) that differ from the sliced layout.
  absl::StatusOr<int64_t> WrongInEngine(const MappedSync& m, const Map& engine);
  // The row of `op`, one of kBenchOps (ParseBenchOps), by the calls above.
  absl::StatusOr<BenchRow> Run(const std::string& op);

 private:
  BenchRunner(const BenchWorkload& workload, Communicator& world, const BenchSettings& settings);
  BenchRow NewRow(const char* op, int root) const;
  // [Shard(0)], or [Replicate] for a 0-dim tensor.
  std::vector<Placement> Placements(size_t i) const;
  // sharded_, once: this rank's piece of every tensor (DistributeTensor).
  absl::Status MakeSharded();
  // Bytes of `got` that differ from tensor i's piece on this rank (all of them when `got`
  // has another size or no data).
  int64_t WrongBytes(const Tensor& got, size_t i, bool whole) const;
  // Checks of sdrt's results, summed over ranks.
  int64_t CheckGathered(const Map& result, bool keep) const;
  int64_t CheckLocal(const Map& local) const;
  const uint8_t* Bytes(size_t i) const;
  // The flat baselines' buffers: this rank's Shard(0) pieces back to back (the all-gather's
  // send buffer), every piece of this rank (distribute's memcpy), every full tensor (the
  // broadcast); and their checks after the timed runs, summed over ranks: the all-gather's
  // received buffer (every rank's pieces in rank order), the broadcast buffer, this rank's
  // pieces.
  void PackOwnPieces(uint8_t* out) const;
  void CopyOwnPieces(uint8_t* out) const;
  void CopyFulls(uint8_t* out) const;
  int64_t FlatGatherWrong(const uint8_t* received) const;
  int64_t FlatBroadcastWrong(const uint8_t* buffer) const;
  int64_t FlatDistributeWrong(const uint8_t* pieces) const;
  // DTensors of every tensor, whole ([Replicate]) when `replicated`, else this rank's
  // pieces (Placements), with zeroed locals in one allocation: an engine's buffers.
  absl::StatusOr<Map> AllocatedDTensors(bool replicated) const;
  // Plans source -> destination once (and binds the plan to them when `bound`), then times
  // ExecuteReshard (BoundReshard::Execute) against `flat` and `fresh` (released by
  // `release`) into row.times; row.stats from the last call.
  absl::Status TimePlanned(bool bound, const Map& source, Map& destination,
                           const std::function<void()>& flat,
                           const std::function<absl::Status()>& fresh,
                           const std::function<void()>& release, BenchRow& row);

  const BenchWorkload& workload_;
  Communicator& world_;
  BenchSettings settings_;
  BenchLayout layout_;
  int rank_;
  std::shared_ptr<const DeviceMesh> mesh_;  // 1-D, every rank
  Map sharded_;                             // this rank's DTensors
  Map meta_;                                // meta DTensors of the same placements
};

}  // namespace sdrt::cli

#endif  // SDRT_TOOLS_SDRT_INTERNAL_BENCH_OPS_H_
