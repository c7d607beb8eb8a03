// BenchRunner::GatherPlanned (bench_ops.h): the gather of a weight sync that repeats, a
// ReshardPlan made once from this rank's Shard(0) DTensors into DTensors [Replicate]
// whose locals the caller allocated (an inference engine's weight buffers), executed
// every call, against the flat all-gather of the same bytes.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_flat.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {

absl::StatusOr<BenchRow> BenchRunner::GatherPlanned() {
  BenchRow row = NewRow("gather_planned", -1);
  const int n = layout_.ranks();
  std::vector<int64_t> counts;
  for (int q = 0; q < n; ++q) counts.push_back(layout_.gather_bytes(q));
  SDRT_ASSIGN_OR_RETURN(std::unique_ptr<FlatAllGather> flat, FlatAllGather::Create(counts, rank_));
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  absl::Status ready = MakeSharded();
  absl::StatusOr<Tensor> send = Tensor::Empty({counts[rank_]}, DType::kUInt8);
  absl::StatusOr<Tensor> recv = Tensor::Empty({total}, DType::kUInt8);
  for (const absl::Status& s : {send.status(), recv.status()}) ready.Update(s);
  // The destination: every tensor whole on every rank, in one allocation (64-byte aligned
  // offsets), as an engine's preallocated weights.
  Map destination;
  destination.Reserve(workload_.full.size());
  int64_t arena_bytes = 0;
  std::vector<int64_t> offsets;
  for (const Tensor& full : workload_.full) {
    offsets.push_back(arena_bytes);
    arena_bytes += (full.nbytes() + 63) / 64 * 64;
  }
  absl::StatusOr<std::shared_ptr<Storage>> arena = Storage::AllocateCpu(arena_bytes);
  ready.Update(arena.status());
  for (size_t i = 0; i < workload_.full.size() && ready.ok(); ++i) {
    const Tensor& full = workload_.full[i];
    absl::StatusOr<Tensor> local =
        Tensor::AtByteOffset(*arena, offsets[i], full.dtype(), full.shape());
    absl::StatusOr<DTensor> d =
        local.ok() ? DTensor::Make(*std::move(local), mesh_, {Placement::Replicate()}, full.shape())
                   : absl::StatusOr<DTensor>(local.status());
    if (d.ok()) destination.Set(workload_.names[i], Value(*std::move(d)));
    ready.Update(d.status());
  }
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  uint8_t* const send_data = static_cast<uint8_t*>(send->data_ptr());
  uint8_t* const recv_data = static_cast<uint8_t*>(recv->data_ptr());
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    if (!layout_.sharded(i)) continue;
    const BenchPiece p = layout_.piece(i, rank_);
    if (p.bytes > 0) std::memcpy(send_data + at, Bytes(i) + p.offset, static_cast<size_t>(p.bytes));
    at += static_cast<size_t>(p.bytes);
  }
  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  SDRT_ASSIGN_OR_RETURN(const ReshardPlan plan, PlanReshard(sharded_, destination, options));
  ReshardStats stats;
  FreshBuffer fresh;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] { return ExecuteReshard(plan, sharded_, destination, &stats); };
  calls.flat = [&] { flat->Run(send_data, recv_data); };
  calls.fresh = [&]() -> absl::Status {
    fresh = AllocateFresh(total);
    if (fresh == nullptr) {
      flat->Run(send_data, recv_data);
      return absl::ResourceExhaustedError(
          absl::StrCat("sdrt bench: no memory for a fresh buffer of ", total, " bytes"));
    }
    flat->Run(send_data, fresh.get());
    return absl::OkStatus();
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));
  row.stats.collectives = stats.collectives;
  row.stats.data_collectives = stats.rounds;
  row.stats.bytes = stats.received_bytes;

  int64_t wrong = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Value* v = destination.Find(workload_.names[i]);
    wrong += v != nullptr && v->kind() == ValueKind::kDTensor
                 ? WrongBytes(v->as_dtensor().local(), i, /*whole=*/true)
                 : workload_.full[i].nbytes();
  }
  row.wrong = SumOverRanks(wrong);
  int64_t flat_wrong = 0;
  size_t at = 0;
  for (int q = 0; q < n; ++q) {
    for (size_t i = 0; i < workload_.full.size(); ++i) {
      if (!layout_.sharded(i)) continue;
      const BenchPiece p = layout_.piece(i, q);
      for (int64_t k = 0; k < p.bytes; ++k) flat_wrong += recv_data[at + k] != Bytes(i)[p.offset + k];
      at += static_cast<size_t>(p.bytes);
    }
  }
  row.flat_wrong = SumOverRanks(flat_wrong);
  return row;
}

}  // namespace sdrt::cli
