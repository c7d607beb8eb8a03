// The layout row of `sdrt bench` (bench_ops.h):
//
//   sync_layout  timed: a model's weight sync between two parallel layouts
//                (core/checkpoint/parallel_layout.h) on the run's ranks: every rank holds its
//                pieces of the workload's tensors under --from (the trainer's; default
//                fsdp:), the engine its zeroed buffers under --to (default vllm:tp=N; one
//                allocation per rank), the plan bound once (BindReshard), and
//                BoundReshard::Execute timed; baseline: one Communicator::Exchange in which
//                every rank sends every other rank an equal share of the bytes it sends in
//                the sync (TransferStats::sent_bytes over its peers: neither the plan nor its
//                figures give the bytes per peer) from one preallocated buffer into another:
//                the wire alone, no packing.
//
// After the timed runs every byte the engine holds is compared with DistributeTensor of the
// full tensor under --to, and every byte the baseline received with what its peer sent,
// #wrong summed over ranks.
#include <cstring>
#include <utility>
#include <vector>

#include "sdrt/core/checkpoint/parallel_layout.h"
#include "sdrt/core/distributed/reshard_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_links.h"
#include "sdrt/tools/sdrt/internal/bench_mapped.h"
#include "sdrt/tools/sdrt/internal/bench_ops.h"
#include "sdrt/tools/sdrt/internal/bench_timing.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// The baseline: rank r sends every peer p its share of sent[r] (equal shares over the
// peers in rank order, the first ones a byte more) from one buffer, at p's offset there,
// and receives every peer's share into another at that peer's offset, in one exchange.
class PeerExchange {
 public:
  // This rank's messages and buffers (the send buffer filled with BenchByte, the receive
  // buffer zeroed); ResourceExhausted when they cannot be had.
  static absl::StatusOr<PeerExchange> Create(std::vector<int64_t> sent, int rank) {
    PeerExchange x;
    x.sent_ = std::move(sent);
    x.rank_ = rank;
    const int n = static_cast<int>(x.sent_.size());
    int64_t received = 0;
    for (int q = 0; q < n; ++q) {
      if (q == rank) continue;
      x.receive_offsets_.push_back(received);
      x.receives_.push_back({q, nullptr, x.Share(q, rank)});
      received += x.Share(q, rank);
    }
    SDRT_ASSIGN_OR_RETURN(x.send_, Tensor::Empty({x.sent_[rank]}, DType::kUInt8));
    SDRT_ASSIGN_OR_RETURN(x.warm_, Tensor::Zeros({received}, DType::kUInt8));
    uint8_t* const out = static_cast<uint8_t*>(x.send_.data_ptr());
    for (int64_t j = 0; j < x.sent_[rank]; ++j) out[j] = BenchByte(rank, j);
    for (int p = 0; p < n; ++p) {
      if (p != rank) x.sends_.push_back({p, out + x.Offset(rank, p), x.Share(rank, p)});
    }
    return x;
  }

  int64_t received_bytes() const { return warm_.nbytes(); }
  uint8_t* warm() const { return static_cast<uint8_t*>(warm_.data_ptr()); }

  // The exchange, into `into` (received_bytes() bytes: the warm buffer or a fresh one).
  absl::Status Run(Communicator& world, uint8_t* into) {
    for (size_t i = 0; i < receives_.size(); ++i) receives_[i].data = into + receive_offsets_[i];
    return world.Exchange(sends_, receives_);
  }

  // Bytes of `got` (the warm buffer after a run) that differ from what the peers sent.
  int64_t Wrong(const uint8_t* got) const {
    int64_t wrong = 0;
    for (size_t i = 0; i < receives_.size(); ++i) {
      const int q = receives_[i].peer;
      const int64_t from = Offset(q, rank_);
      for (int64_t j = 0; j < receives_[i].bytes; ++j) {
        wrong += got[receive_offsets_[i] + j] != BenchByte(q, from + j) ? 1 : 0;
      }
    }
    return wrong;
  }

 private:
  PeerExchange() = default;
  // The bytes rank `from` sends rank `to`.
  int64_t Share(int from, int to) const {
    const int64_t peers = static_cast<int64_t>(sent_.size()) - 1;
    const int64_t place = to < from ? to : to - 1;  // `to`'s among `from`'s peers
    return sent_[from] / peers + (place < sent_[from] % peers ? 1 : 0);
  }
  // Where they lie in `from`'s send buffer.
  int64_t Offset(int from, int to) const {
    int64_t at = 0;
    for (int p = 0; p < to; ++p) at += p == from ? 0 : Share(from, p);
    return at;
  }

  std::vector<int64_t> sent_;
  int rank_ = 0;
  Tensor send_, warm_;
  std::vector<Communicator::SendMessage> sends_;
  std::vector<Communicator::ReceiveMessage> receives_;
  std::vector<int64_t> receive_offsets_;
};

// The DTensors of `meta` (meta locals) given zeroed locals, views of one allocation: an
// engine's weight buffers.
absl::Status AllocateLocals(Map& meta) {
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (size_t i = 0; i < meta.size(); ++i) {
    const Tensor& local = meta.value(i).as_dtensor().local();
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(local.dtype(), local.numel()));
    offsets.push_back(total);
    total += (bytes + 63) / 64 * 64;
  }
  SDRT_ASSIGN_OR_RETURN(const std::shared_ptr<Storage> arena, Storage::AllocateCpu(total));
  if (total > 0) std::memset(arena->data(), 0, static_cast<size_t>(total));
  for (size_t i = 0; i < meta.size(); ++i) {
    const DTensor& d = meta.value(i).as_dtensor();
    SDRT_ASSIGN_OR_RETURN(Tensor local,
                          Tensor::AtByteOffset(arena, offsets[i], d.dtype(), d.local().shape()));
    SDRT_ASSIGN_OR_RETURN(DTensor allocated, d.WithLocal(std::move(local)));
    meta.value(i) = Value(std::move(allocated));
  }
  return absl::OkStatus();
}

// A tensor of the workload that this rank holds under a layout, and its home.
struct Held {
  size_t index;
  LaidOutTensor home;
};

absl::StatusOr<std::vector<Held>> HeldUnder(const ParallelLayout& layout,
                                            const std::vector<SafetensorsTensorSpec>& specs,
                                            int rank) {
  SDRT_ASSIGN_OR_RETURN(std::vector<LaidOutTensor> placed, layout.Place(specs));
  std::vector<Held> held;
  for (size_t i = 0; i < placed.size(); ++i) {
    if (placed[i].mesh->Coordinate(rank).has_value()) held.push_back({i, std::move(placed[i])});
  }
  return held;
}

}  // namespace

absl::StatusOr<BenchRow> BenchRunner::SyncLayout() {
  BenchRow row = NewRow("sync_layout", -1);
  // The command checked both (the same on every rank).
  SDRT_ASSIGN_OR_RETURN(const ParallelLayout from,
                        ParallelLayout::Parse(settings_.from_layout, world_.size()));
  SDRT_ASSIGN_OR_RETURN(const ParallelLayout to,
                        ParallelLayout::Parse(settings_.to_layout, world_.size()));
  row.from_layout = from.ToString();
  row.to_layout = to.ToString();
  std::vector<SafetensorsTensorSpec> specs;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    specs.push_back({workload_.names[i], workload_.full[i].dtype(), workload_.full[i].shape()});
  }
  // The trainer's pieces under --from, the engine's zeroed buffers under --to.
  absl::StatusOr<std::vector<Held>> sources = HeldUnder(from, specs, rank_);
  absl::StatusOr<std::vector<Held>> homes = HeldUnder(to, specs, rank_);
  absl::StatusOr<Map> engine = to.MetaStateDict(specs, rank_);
  absl::Status ready = sources.status();
  for (const absl::Status& s : {homes.status(), engine.status()}) ready.Update(s);
  if (ready.ok()) ready = AllocateLocals(*engine);
  Map trainer;
  for (size_t k = 0; ready.ok() && k < sources->size(); ++k) {
    const Held& h = (*sources)[k];
    absl::StatusOr<DTensor> piece =
        DistributeTensor(workload_.full[h.index], h.home.mesh, h.home.placements, rank_);
    ready = piece.status();
    if (piece.ok()) trainer.Set(workload_.names[h.index], Value(*std::move(piece)));
  }
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));

  ReshardOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  absl::StatusOr<ReshardPlan> plan = PlanReshard(trainer, *engine, options);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, plan.status()));
  absl::StatusOr<BoundReshard> sync = BindReshard(*plan, trainer, *engine);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, sync.status()));
  // One untimed sync (its outcome the same on every rank) for this rank's sent bytes, which
  // the baseline shares out.
  TransferStats stats;
  SDRT_RETURN_IF_ERROR(sync->Execute(&stats));
  absl::StatusOr<PeerExchange> flat =
      PeerExchange::Create(GatherOverRanks(stats.sent_bytes), rank_);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, flat.status()));

  FreshBuffer fresh;
  absl::Status flat_status;
  BenchCalls calls;
  calls.prepare = [] {};
  calls.sdrt = [&] { return sync->Execute(&stats); };
  calls.flat = [&] {
    const absl::Status s = flat->Run(world_, flat->warm());
    EndJobIfTimedOut("bench", s);  // a rank is missing: nothing after this can be agreed
    flat_status.Update(s);
  };
  calls.raw_baselines = false;
  calls.fresh = [&] {
    absl::Status status;
    uint8_t* const into = FreshOrWarm(flat->received_bytes(), flat->warm(), &fresh, &status);
    status.Update(flat->Run(world_, into));
    return status;
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, flat_status));
  row.stats = stats;
  row.wire_bytes = stats.wire_bytes;
  row.flat_wire_bytes = SumOverRanks(stats.sent_bytes);

  // The checks: every engine local against the full tensor's piece under --to.
  int64_t wrong = 0;
  for (const Held& h : *homes) {
    const Tensor& full = workload_.full[h.index];
    const Value* got = engine->Find(workload_.names[h.index]);
    absl::StatusOr<DTensor> want = DistributeTensor(full, h.home.mesh, h.home.placements, rank_);
    if (got == nullptr || got->kind() != ValueKind::kDTensor || !want.ok()) {
      wrong += want.ok() ? want->local().nbytes() : full.nbytes();
      continue;
    }
    wrong += DifferingBytes(got->as_dtensor().local(), want->local());
  }
  row.wrong = SumOverRanks(wrong);
  row.flat_wrong = SumOverRanks(flat->Wrong(flat->warm()));
  return row;
}

}  // namespace sdrt::cli
