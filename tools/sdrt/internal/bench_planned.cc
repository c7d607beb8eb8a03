// The planned rows of `sdrt bench` (bench_ops.h): a weight sync that repeats, done by a
// ReshardPlan made once (PlanReshard, untimed) and executed every call (ExecuteReshard,
// timed) into DTensors whose locals the caller allocated (an inference engine's weight
// buffers, one allocation per rank), against the same flat baselines as the one-shot rows:
//
//   gather_planned      Shard(0) DTensors -> DTensors [Replicate] on every rank, vs the
//                       flat all-gather;
//   broadcast_planned   rank 0's full tensors -> Shard(0) DTensors, vs the flat broadcast
//                       (the plan sends each rank only its rows);
//   distribute_planned  every rank's full tensors -> Shard(0) DTensors (no wire: each
//                       rank copies its rows), vs a memcpy of the rank's bytes.
//
// The bound rows (gather_bound, broadcast_bound, distribute_bound) are the same moves with
// the plan also bound to both sides once (BindReshard, untimed) and BoundReshard::Execute
// timed: what a weight sync costs when the trainer and the engine keep their buffers.
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_flat.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

uint8_t* Data(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

}  // namespace

absl::StatusOr<Map> BenchRunner::AllocatedDTensors(bool replicated) const {
  // Every local a view of one allocation at 64-byte aligned offsets.
  std::vector<IntVector> shapes;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Tensor& full = workload_.full[i];
    IntVector shape = full.shape();
    if (!replicated) {
      SDRT_ASSIGN_OR_RETURN(shape, ComputeLocalShape(full.shape(), *mesh_, Placements(i), rank_));
    }
    SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(shape));
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(full.dtype(), numel));
    offsets.push_back(total);
    shapes.push_back(std::move(shape));
    total += (bytes + 63) / 64 * 64;
  }
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> arena, Storage::AllocateCpu(total));
  if (total > 0) std::memset(arena->data(), 0, static_cast<size_t>(total));
  Map out;
  out.Reserve(workload_.full.size());
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Tensor& full = workload_.full[i];
    SDRT_ASSIGN_OR_RETURN(Tensor local,
                          Tensor::AtByteOffset(arena, offsets[i], full.dtype(), shapes[i]));
    SDRT_ASSIGN_OR_RETURN(
        DTensor d,
        DTensor::Make(std::move(local), mesh_,
                      replicated ? std::vector<Placement>{Placement::Replicate()} : Placements(i),
                      full.shape()));
    out.Set(workload_.names[i], Value(std::move(d)));
  }
  return out;
}

absl::Status BenchRunner::TimePlanned(bool bound, const Map& source, Map& destination,
                                      const std::function<void()>& flat,
                                      const std::function<absl::Status()>& fresh,
                                      const std::function<void()>& release, BenchRow& row) {
  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(source, destination, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, plan.status()));
  std::optional<BoundReshard> sync;
  if (bound) {
    absl::StatusOr<BoundReshard> made = BindReshard(*plan, source, destination);
    SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, made.status()));
    sync.emplace(*std::move(made));
  }
  TransferStats stats;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] {
    return sync.has_value() ? sync->Execute(&stats)
                            : ExecuteReshard(*plan, source, destination, &stats);
  };
  calls.flat = flat;
  calls.fresh = fresh;
  calls.release = release;
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));
  row.stats.collectives = stats.collectives;
  row.stats.exchanges = stats.exchanges;
  row.stats.received_bytes = stats.received_bytes;
  return absl::OkStatus();
}

absl::StatusOr<BenchRow> BenchRunner::GatherPlanned(bool bound) {
  BenchRow row = NewRow(bound ? "gather_bound" : "gather_planned", -1);
  const int n = layout_.ranks();
  std::vector<int64_t> counts;
  for (int q = 0; q < n; ++q) counts.push_back(layout_.gather_bytes(q));
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<FlatAllGather> flat, FlatAllGather::Create(counts, rank_));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  absl::Status ready = MakeSharded();
  absl::StatusOr<Tensor> send = Tensor::Empty({counts[rank_]}, DType::kUInt8);
  absl::StatusOr<Tensor> recv = Tensor::Empty({total}, DType::kUInt8);
  absl::StatusOr<Map> destination = AllocatedDTensors(/*replicated=*/true);
  for (const absl::Status& s : {send.status(), recv.status(), destination.status()}) {
    ready.Update(s);
  }
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  PackOwnPieces(Data(*send));
  FreshBuffer fresh;
  SDRT_RETURN_IF_ERROR(TimePlanned(
      bound, sharded_, *destination, [&] { flat->Run(Data(*send), Data(*recv)); },
      [&] {
        absl::Status status;
        flat->Run(Data(*send), FreshOrWarm(total, Data(*recv), &fresh, &status));
        return status;
      },
      [&] { fresh.reset(); }, row));

  int64_t wrong = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Value* v = destination->Find(workload_.names[i]);
    wrong += v != nullptr && v->kind() == ValueKind::kDTensor
                 ? WrongBytes(v->as_dtensor().local(), i, /*whole=*/true)
                 : workload_.full[i].nbytes();
  }
  row.wrong = SumOverRanks(wrong);
  row.flat_wrong = FlatGatherWrong(Data(*recv));
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::BroadcastPlanned(bool bound) {
  BenchRow row = NewRow(bound ? "broadcast_bound" : "broadcast_planned", 0);
  const int64_t total = workload_.bytes;
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<FlatBroadcast> flat, FlatBroadcast::Create(total));
  absl::StatusOr<Tensor> buffer = Tensor::Empty({total}, DType::kUInt8);
  absl::StatusOr<Map> destination = AllocatedDTensors(/*replicated=*/false);
  absl::Status ready = buffer.status();
  ready.Update(destination.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  CopyFulls(Data(*buffer));
  Map full_on_root;
  for (size_t i = 0; i < workload_.full.size() && rank_ == 0; ++i) {
    full_on_root.Set(workload_.names[i], Value(workload_.full[i]));
  }
  FreshBuffer fresh;
  SDRT_RETURN_IF_ERROR(TimePlanned(
      bound, full_on_root, *destination, [&] { flat->Run(Data(*buffer)); },
      [&] {
        // The root sends from its (warm) buffer; every other rank receives into a new one.
        absl::Status status;
        flat->Run(rank_ == 0 ? Data(*buffer) : FreshOrWarm(total, Data(*buffer), &fresh, &status));
        return status;
      },
      [&] { fresh.reset(); }, row));
  row.wrong = CheckLocal(*destination);
  row.flat_wrong = FlatBroadcastWrong(Data(*buffer));
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::DistributePlanned(bool bound) {
  BenchRow row = NewRow(bound ? "distribute_bound" : "distribute_planned", -1);
  const int64_t mine = layout_.local_bytes(rank_);
  row.busbw_bytes = layout_.local_bytes(0);
  absl::StatusOr<Tensor> warm = Tensor::Empty({mine}, DType::kUInt8);
  absl::StatusOr<Map> destination = AllocatedDTensors(/*replicated=*/false);
  absl::Status ready = warm.status();
  ready.Update(destination.status());
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  Map full_everywhere;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    full_everywhere.Set(workload_.names[i], Value(workload_.full[i]));
  }
  FreshBuffer fresh;
  SDRT_RETURN_IF_ERROR(TimePlanned(
      bound, full_everywhere, *destination, [&] { CopyOwnPieces(Data(*warm)); },
      [&] {
        absl::Status status;
        CopyOwnPieces(FreshOrWarm(mine, Data(*warm), &fresh, &status));
        return status;
      },
      [&] { fresh.reset(); }, row));
  row.wrong = CheckLocal(*destination);
  row.flat_wrong = FlatDistributeWrong(Data(*warm));
  return row;
}

}  // namespace sdrt::cli
