#include "sdrt/tools/sdrt/internal/bench_ops.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/dtensor/device_mesh.h"
#include "sdrt/tensor/dtensor/placement.h"
#include "sdrt/tensor/sharding/distribute.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"
#include "sdrt/tools/sdrt/internal/bench_flat.h"
#include "sdrt/tools/sdrt/internal/bench_links.h"
#include "sdrt/tools/sdrt/internal/deadline.h"

namespace sdrt::cli {
namespace {

// Bytes of [got, got + bytes) that differ from [want, want + bytes).
int64_t DifferingBytes(const uint8_t* got, const uint8_t* want, int64_t bytes) {
  if (bytes == 0 || std::memcmp(got, want, static_cast<size_t>(bytes)) == 0) return 0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < bytes; ++i) wrong += got[i] != want[i];
  return wrong;
}

// memcpy that accepts null pointers for zero bytes (empty tensors have no data pointer).
void CopyBytes(uint8_t* to, const uint8_t* from, int64_t bytes) {
  if (bytes > 0) std::memcpy(to, from, static_cast<size_t>(bytes));
}

// A zeroed CPU buffer: a uint8 tensor, so that running out of memory is ResourceExhausted,
// not an exception.
absl::StatusOr<Tensor> ZeroedBuffer(int64_t bytes) {
  SDRT_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({bytes}, DType::kUInt8));
  if (bytes > 0) std::memset(t.data_ptr(), 0, static_cast<size_t>(bytes));
  return t;
}

uint8_t* Data(const Tensor& t) { return static_cast<uint8_t*>(t.data_ptr()); }

}  // namespace

BenchRunner::BenchRunner(const BenchWorkload& workload, Communicator& world,
                         const BenchSettings& settings)
    : workload_(workload),
      world_(world),
      settings_(settings),
      layout_(workload, world.size()),
      rank_(world.rank()) {}

absl::StatusOr<std::unique_ptr<BenchRunner>> BenchRunner::Create(const BenchWorkload& workload,
                                                                 Communicator& world,
                                                                 const BenchSettings& settings) {
  auto runner = std::unique_ptr<BenchRunner>(new BenchRunner(workload, world, settings));
  SDRT_ASSIGN_OR_RETURN(DeviceMesh mesh, DeviceMesh::Create({int64_t{world.size()}}));
  runner->mesh_ = std::make_shared<const DeviceMesh>(std::move(mesh));
  runner->meta_.Reserve(workload.full.size());
  for (size_t i = 0; i < workload.full.size(); ++i) {
    const Tensor& full = workload.full[i];
    SDRT_ASSIGN_OR_RETURN(const Tensor meta_full, Tensor::Meta(full.shape(), full.dtype()));
    SDRT_ASSIGN_OR_RETURN(DTensor meta, DistributeTensor(meta_full, runner->mesh_,
                                                         runner->Placements(i), world.rank()));
    runner->meta_.Set(workload.names[i], Value(std::move(meta)));
  }
  return runner;
}

std::vector<Placement> BenchRunner::Placements(size_t i) const {
  return {layout_.sharded(i) ? Placement::Shard(0) : Placement::Replicate()};
}

absl::Status BenchRunner::MakeSharded() {
  if (!sharded_.empty() || workload_.full.empty()) return absl::OkStatus();
  sharded_.Reserve(workload_.full.size());
  // With arena inputs this rank's pieces are views of one allocation, laid out in order at
  // 64-byte aligned offsets (a training framework's flat parameter buffer).
  std::shared_ptr<Storage> arena;
  std::vector<int64_t> offsets(workload_.full.size());
  if (settings_.arena_inputs) {
    int64_t total = 0;
    for (size_t i = 0; i < workload_.full.size(); ++i) {
      const Tensor& full = workload_.full[i];
      SDRT_ASSIGN_OR_RETURN(const IntVector shape,
                            ComputeLocalShape(full.shape(), *mesh_, Placements(i), rank_));
      SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(shape));
      SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(full.dtype(), numel));
      offsets[i] = total;
      total += (bytes + 63) / 64 * 64;
    }
    SDRT_ASSIGN_OR_RETURN(arena, Storage::AllocateCpu(total));
  }
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Tensor& full = workload_.full[i];
    if (arena == nullptr) {
      SDRT_ASSIGN_OR_RETURN(DTensor piece, DistributeTensor(full, mesh_, Placements(i), rank_));
      sharded_.Set(workload_.names[i], Value(std::move(piece)));
      continue;
    }
    SDRT_ASSIGN_OR_RETURN(const IntVector shape,
                          ComputeLocalShape(full.shape(), *mesh_, Placements(i), rank_));
    SDRT_ASSIGN_OR_RETURN(Tensor local,
                          Tensor::AtByteOffset(arena, offsets[i], full.dtype(), shape));
    SDRT_RETURN_IF_ERROR(DistributeTensorInto(full, *mesh_, Placements(i), rank_, local));
    SDRT_ASSIGN_OR_RETURN(DTensor piece,
                          DTensor::Make(std::move(local), mesh_, Placements(i), full.shape()));
    sharded_.Set(workload_.names[i], Value(std::move(piece)));
  }
  return absl::OkStatus();
}

const uint8_t* BenchRunner::Bytes(size_t i) const {
  return static_cast<const uint8_t*>(workload_.full[i].data_ptr());
}

BenchRow BenchRunner::NewRow(const char* op, int root) const {
  BenchRow row;
  row.op = op;
  row.size = workload_.bytes;
  row.count = static_cast<int64_t>(workload_.full.size());
  row.type = workload_.type;
  row.root = root;
  row.busbw_bytes = workload_.bytes;
  return row;
}

int64_t BenchRunner::WrongBytes(const Tensor& got, size_t i, bool whole) const {
  const BenchPiece piece =
      whole ? BenchPiece{0, workload_.full[i].nbytes()} : layout_.piece(i, rank_);
  if (!got.defined() || got.is_meta() || got.nbytes() != piece.bytes) return piece.bytes;
  if (piece.bytes == 0) return 0;
  absl::StatusOr<Tensor> contiguous = got.Contiguous();
  if (!contiguous.ok()) return piece.bytes;
  return DifferingBytes(static_cast<const uint8_t*>(contiguous->data_ptr()),
                        Bytes(i) + piece.offset, piece.bytes);
}

int64_t BenchRunner::CheckGathered(const Map& result, bool keep) const {
  if (!keep) return SumOverRanks(result.empty() ? 0 : workload_.bytes);
  int64_t wrong = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Tensor& want = workload_.full[i];
    const Value* v = result.Find(workload_.names[i]);
    if (v == nullptr || v->kind() != ValueKind::kTensor || v->as_tensor().shape() != want.shape() ||
        v->as_tensor().dtype() != want.dtype()) {
      wrong += want.nbytes();
      continue;
    }
    wrong += WrongBytes(v->as_tensor(), i, /*whole=*/true);
  }
  return SumOverRanks(wrong);
}

int64_t BenchRunner::CheckLocal(const Map& local) const {
  int64_t wrong = 0;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    const Value* v = local.Find(workload_.names[i]);
    const int64_t want = layout_.piece(i, rank_).bytes;
    if (v != nullptr && v->kind() == ValueKind::kDTensor &&
        v->as_dtensor().global_shape() == workload_.full[i].shape()) {
      wrong += WrongBytes(v->as_dtensor().local(), i, /*whole=*/false);
    } else if (v != nullptr && v->kind() == ValueKind::kTensor && !layout_.sharded(i)) {
      wrong += WrongBytes(v->as_tensor(), i, /*whole=*/true);  // a 0-dim tensor comes whole
    } else {
      wrong += want;
    }
  }
  return SumOverRanks(wrong);
}

void BenchRunner::PackOwnPieces(uint8_t* out) const {
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    if (!layout_.sharded(i)) continue;
    const BenchPiece p = layout_.piece(i, rank_);
    CopyBytes(out + at, Bytes(i) + p.offset, p.bytes);
    at += static_cast<size_t>(p.bytes);
  }
}

void BenchRunner::CopyOwnPieces(uint8_t* out) const {
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    const BenchPiece p = layout_.piece(i, rank_);
    CopyBytes(out + at, Bytes(i) + p.offset, p.bytes);
    at += static_cast<size_t>(p.bytes);
  }
}

void BenchRunner::CopyFulls(uint8_t* out) const {
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    CopyBytes(out + at, Bytes(i), workload_.full[i].nbytes());
    at += static_cast<size_t>(workload_.full[i].nbytes());
  }
}

int64_t BenchRunner::FlatGatherWrong(const uint8_t* received) const {
  int64_t wrong = 0;
  size_t at = 0;
  for (int q = 0; q < layout_.ranks(); ++q) {
    for (size_t i = 0; i < workload_.full.size(); ++i) {
      if (!layout_.sharded(i)) continue;
      const BenchPiece p = layout_.piece(i, q);
      wrong += DifferingBytes(received + at, Bytes(i) + p.offset, p.bytes);
      at += static_cast<size_t>(p.bytes);
    }
  }
  return SumOverRanks(wrong);
}

int64_t BenchRunner::FlatBroadcastWrong(const uint8_t* buffer) const {
  int64_t wrong = 0;
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    const int64_t b = workload_.full[i].nbytes();
    wrong += DifferingBytes(buffer + at, Bytes(i), b);
    at += static_cast<size_t>(b);
  }
  return SumOverRanks(wrong);
}

int64_t BenchRunner::FlatDistributeWrong(const uint8_t* pieces) const {
  int64_t wrong = 0;
  for (size_t i = 0, at = 0; i < workload_.full.size(); ++i) {
    const BenchPiece p = layout_.piece(i, rank_);
    wrong += DifferingBytes(pieces + at, Bytes(i) + p.offset, p.bytes);
    at += static_cast<size_t>(p.bytes);
  }
  return SumOverRanks(wrong);
}

absl::StatusOr<BenchRow> BenchRunner::Gather(bool offload_to_rank0) {
  BenchRow row = NewRow(offload_to_rank0 ? "gather_r0_off" : "gather", -1);
  const int n = layout_.ranks();
  std::vector<int64_t> counts;
  for (int q = 0; q < n; ++q) counts.push_back(layout_.gather_bytes(q));
  absl::StatusOr<std::unique_ptr<FlatAllGather>> flat = FlatAllGather::Create(counts, rank_);
  if (!flat.ok()) return flat.status();
  // The flat all-gather's buffers: this rank's pieces packed, and every rank's after them.
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  absl::StatusOr<Tensor> send = ZeroedBuffer(counts[rank_]);
  absl::StatusOr<Tensor> recv = ZeroedBuffer(total);
  absl::Status ready = MakeSharded();
  for (const absl::Status& s : {send.status(), recv.status()}) ready.Update(s);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, ready));
  PackOwnPieces(Data(*send));
  FreshBuffer fresh;

  std::optional<Map> result;
  GatherOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  options.stats = &row.stats;
  if (offload_to_rank0) {
    options.cpu_offload = true;
    options.ranks_only = {0};
  }
  BenchCalls calls;
  calls.prepare = [&] { result.reset(); };
  calls.sdrt = [&]() -> absl::Status {
    absl::StatusOr<Map> gathered = GatherStateDict(sharded_, options);
    if (!gathered.ok()) return gathered.status();
    result = *std::move(gathered);
    return absl::OkStatus();
  };
  calls.flat = [&] { (*flat)->Run(Data(*send), Data(*recv)); };
  calls.fresh = [&] {
    absl::Status status;
    (*flat)->Run(Data(*send), FreshOrWarm(total, Data(*recv), &fresh, &status));
    return status;
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));

  row.wrong = CheckGathered(*result, !offload_to_rank0 || rank_ == 0);
  row.flat_wrong = FlatGatherWrong(Data(*recv));
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::Broadcast() {
  BenchRow row = NewRow("broadcast", 0);
  const int64_t total = workload_.bytes;
  absl::StatusOr<std::unique_ptr<FlatBroadcast>> flat = FlatBroadcast::Create(total);
  if (!flat.ok()) return flat.status();
  absl::StatusOr<Tensor> buffer = ZeroedBuffer(total);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, buffer.status()));
  Map full_on_root;
  if (rank_ == 0) {
    CopyFulls(Data(*buffer));
    for (size_t i = 0; i < workload_.full.size(); ++i) {
      full_on_root.Set(workload_.names[i], Value(workload_.full[i]));
    }
  }
  FreshBuffer fresh;
  Map local;
  BroadcastOptions options;
  options.comm = &world_;
  options.bucket_bytes = settings_.bucket_bytes;
  options.stats = &row.stats;
  BenchCalls calls;
  calls.prepare = [&] { local = meta_; };
  calls.sdrt = [&] { return BroadcastStateDict(full_on_root, local, options).status(); };
  calls.flat = [&] { (*flat)->Run(Data(*buffer)); };
  calls.fresh = [&] {
    // The root sends from its (warm) buffer; every other rank receives into a new one.
    absl::Status status;
    (*flat)->Run(rank_ == 0 ? Data(*buffer) : FreshOrWarm(total, Data(*buffer), &fresh, &status));
    return status;
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));

  row.wrong = CheckLocal(local);
  row.flat_wrong = FlatBroadcastWrong(Data(*buffer));
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::Distribute() {
  BenchRow row = NewRow("distribute", -1);
  const int64_t mine = layout_.local_bytes(rank_);
  row.busbw_bytes = layout_.local_bytes(0);
  Map full_everywhere;
  for (size_t i = 0; i < workload_.full.size(); ++i) {
    full_everywhere.Set(workload_.names[i], Value(workload_.full[i]));
  }
  absl::StatusOr<Tensor> warm = ZeroedBuffer(mine);
  SDRT_RETURN_IF_ERROR(AgreeUnlessTimedOut(world_, warm.status()));
  FreshBuffer fresh;
  Map local;
  DistributeOptions options;
  options.rank = rank_;
  BenchCalls calls;
  calls.prepare = [&] { local = meta_; };
  calls.sdrt = [&] { return DistributeStateDict(full_everywhere, local, options); };
  calls.flat = [&] { CopyOwnPieces(Data(*warm)); };
  calls.fresh = [&] {
    absl::Status status;
    CopyOwnPieces(FreshOrWarm(mine, Data(*warm), &fresh, &status));
    return status;
  };
  calls.release = [&] { fresh.reset(); };
  SDRT_RETURN_IF_ERROR(
      MeasureRow(world_, calls, settings_.warmup, settings_.iterations, &row.times));

  row.wrong = CheckLocal(local);
  row.flat_wrong = FlatDistributeWrong(Data(*warm));
  return row;
}

absl::StatusOr<BenchRow> BenchRunner::Run(const std::string& op) {
  if (op == "gather") return Gather(false);
  if (op == "gather_r0_off") return Gather(true);
  if (op == "broadcast") return Broadcast();
  if (op == "distribute") return Distribute();
  if (op == "gather_partial") return GatherPartial();
  if (op == "gather_planned") return GatherPlanned(false);
  if (op == "broadcast_planned") return BroadcastPlanned(false);
  if (op == "distribute_planned") return DistributePlanned(false);
  if (op == "gather_bound") return GatherPlanned(true);
  if (op == "broadcast_bound") return BroadcastPlanned(true);
  if (op == "distribute_bound") return DistributePlanned(true);
  if (op == "sync_mapped") return SyncMapped();
  if (op == "sync_fp8") return SyncFp8();
  if (op == "sync_regroup") return SyncRegroup();
  if (op == "links") return MeasureLinks(world_, settings_);
  if (op == "sync_layout") return SyncLayout();
  return absl::InvalidArgumentError(absl::StrCat("sdrt bench: unknown op \"", op, "\""));
}

}  // namespace sdrt::cli
