// The gather plan: how the pieces of DTensors and ShardedTensors held by the ranks of a
// communicator become full tensors on every rank. One plan serves FullTensor and
// GatherShardedTensor (core/distributed/dtensor_ops.h: one item, one bucket) and
// GatherStateDict (core/distributed/distributed_state_dict.h: many items in buckets).
// Not public API.
//
//   1. Items. Each tensor to gather is a GatherItem: what this rank sends and, per rank,
//      the pieces that rank sends (shape as packed, and the runs of global indices each
//      covers, tensor/sharding/region_copy.h). A DTensor's item is computed from the
//      sharding arithmetic alone (every rank's local shape and owned runs; the ranks that
//      only hold a copy of another rank's piece send nothing). A ShardedTensor's item
//      needs the other ranks' shard boxes: ExchangeShardBoxes fetches them for all
//      ShardedTensor items at once (one AllGatherBytes) and checks that they fit.
//   2. Partial reduction. Before its item is made, a DTensor's Partial mesh dims are
//      all-reduced (internal/partial_buckets.h: many DTensors with one all-reduce per
//      bucket and mesh dim), always in a copy of the local tensor made on the device the
//      buckets live on (so the reduced copy is packed without another move), on each
//      mesh dim's communicator, in MeshDimsToReplicate order. GatherStateDict keeps
//      its buckets on the communicator's device, FullTensor on the local tensor's
//      (so a CPU local over a staging NCCL communicator is reduced and gathered on the
//      CPU and no GPU memory is touched); the reduction itself runs on the same backend
//      either way, so the results are the same bits.
//   3. Buckets. BucketItems groups consecutive items until the bytes gathered reach the
//      bucket size (one item alone may exceed it).
//   4. Execution. GatherBucket packs this rank's pieces of the bucket's items into one
//      byte buffer, each piece at a 16-byte aligned offset (internal/buckets.h; a rank's
//      several ShardedTensor shards too), runs one AllGatherV, and unpacks every rank's
//      pieces into the full tensors by their runs; CPU targets of a bucket gathered on a
//      GPU are unpacked from one copy of the bucket in pinned host memory.
#ifndef SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_PLAN_H_
#define SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_PLAN_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "sdrt/comm/communicator.h"
#include "sdrt/comm/device_mesh_comm.h"
#include "sdrt/core/distributed/distributed_state_dict.h"
#include "sdrt/tensor/dtensor/dtensor.h"
#include "sdrt/tensor/dtensor/sharded_tensor.h"
#include "sdrt/tensor/sharding/region_copy.h"
#include "sdrt/tensor/storage.h"
#include "sdrt/tensor/tensor.h"

namespace sdrt::internal {

// One piece a rank sends: packed contiguously as `shape`, its elements going to the
// global indices `runs` names (local order, as CopyRuns takes them).
struct GatherPiece {
  IntVector shape;
  ShardRuns runs;
};

// Where every rank's pieces of one tensor come from: shared by the items of one layout
// (same mesh, placements, global shape and dtype), so a layout is worked out once per
// call however many tensors have it.
struct GatherLayout {
  // Every rank's pieces in rank order, each rank's in packing order (zero-element pieces
  // left out): rank q's are pieces[piece_begin[q], piece_begin[q + 1]).
  std::vector<GatherPiece> pieces;
  std::vector<size_t> piece_begin;  // comm size + 1 entries
  // Per rank, the bytes of its pieces, each piece padded to a multiple of 16 bytes (its
  // slot in the gathered bucket; internal/buckets.h's AlignUp).
  std::vector<int64_t> rank_bytes;

  absl::Span<const GatherPiece> PiecesOf(int q) const {
    return absl::MakeConstSpan(pieces).subspan(piece_begin[q], piece_begin[q + 1] - piece_begin[q]);
  }
};

// One tensor to gather.
struct GatherItem {
  DType dtype = DType::kFloat32;
  IntVector global_shape;
  // Where the full tensor is made.
  Device target = Device::CPU();
  // True for a ShardedTensor: elements no piece covers are zero. A DTensor's pieces cover
  // every element.
  bool zero_fill = false;
  // The ShardedTensor this item gathers (ExchangeShardBoxes reads its local shards), or
  // nullptr for a DTensor.
  const ShardedTensor* sharded = nullptr;
  // This rank's pieces in the order they are packed; zero-element tensors are skipped.
  absl::InlinedVector<Tensor, 1> sends;
  // Every rank's pieces (a ShardedTensor's own, made by ExchangeShardBoxes).
  std::shared_ptr<const GatherLayout> layout;

  const std::vector<int64_t>& rank_bytes() const { return layout->rank_bytes; }
};

// A hash of `dtensor`'s layout: its mesh's address, global shape and placements (FNV-1a).
// The key of the per-call caches of what a layout determines (GatherLayoutCache and
// GatherStateDict's local-shape check); entries still compare the fields themselves.
uint64_t HashLayout(const DTensor& dtensor);

// The layouts of one call's DTensor items, by (mesh, placements, global shape, dtype):
// MakeDTensorItem works a layout out once and shares it.
class GatherLayoutCache {
 public:
  GatherLayoutCache();
  ~GatherLayoutCache();
  // The cached layout of `dtensor`'s kind of tensor, or nullptr.
  std::shared_ptr<const GatherLayout> Find(const DTensor& dtensor) const;
  void Add(const DTensor& dtensor, std::shared_ptr<const GatherLayout> layout);

 private:
  struct Entry;
  static uint64_t Key(const DTensor& dtensor);
  absl::flat_hash_map<uint64_t, std::vector<Entry>> entries_;
};

// The item of a DTensor over a communicator of `comm_size` ranks whose mesh is the
// DTensor's (mesh rank == communicator rank): this rank (`rank`) sends `local` (its
// local with the Partial mesh dims reduced, internal/partial_buckets.h, of this rank's
// local shape) unless it only holds a copy, i.e. its coordinate is not 0 on some
// Replicate or Partial mesh dim; every other rank sends its local shape's elements by its
// owned runs. No communication. Errors of
// ComputeLocalShapeAndGlobalOffset.
// With `cache` (not null), the layout comes from it when cached and is added to it
// otherwise.
absl::StatusOr<GatherItem> MakeDTensorItem(const DTensor& dtensor, const Tensor& local,
                                           int comm_size, int rank, Device target,
                                           GatherLayoutCache* cache = nullptr);

// The item of a ShardedTensor: this rank sends its local shards in list order; the other
// ranks' pieces are unknown until ExchangeShardBoxes. `st` must outlive the item.
GatherItem MakeShardedItem(const ShardedTensor& st, Device target);

// What GatherShardedTensor alone also agrees on in the box exchange (GatherStateDict's
// agreement has already compared dtypes and global shapes): every rank's dtype and global
// shape must equal this rank's, and each rank tells where its shards are.
struct StandaloneBoxCheck {
  int64_t device_code = 0;                 // this rank's, meaning given by the caller
  std::vector<int64_t> rank_device_codes;  // filled: every rank's, in rank order
};

// The one exchange of shard boxes (one AllGatherBytes, counted in `stats` when not null):
// every ShardedTensor item (item.sharded set; the others are passed over) gets every
// rank's pieces (one per local shard with elements, placed by BoxRuns) and bytes, in the
// order of that rank's local shard list. Every rank reaches the same verdict:
// InvalidArgument naming `op` when a shard of some rank does not fit in the global shape
// (a negative offset or size, or a non-empty box past the end), when a rank's message is
// malformed, and with `standalone` when some rank's dtype, rank or global shape differs
// from this rank's ("rank Q has a ShardedTensor of <dtype><shape>, rank R one of ...").
absl::Status ExchangeShardBoxes(Communicator& comm, absl::string_view op,
                                absl::Span<GatherItem* const> items, StandaloneBoxCheck* standalone,
                                CollectiveStats* stats);

// The buckets of `items`, as [begin, end) ranges of consecutive items: an item joins the
// current bucket while the bytes gathered (every rank's pieces, each padded to 16 bytes)
// stay within `bucket_bytes`; a bucket holds one item at least. Pure arithmetic.
std::vector<std::pair<size_t, size_t>> BucketItems(absl::Span<const GatherItem> items,
                                                   int64_t bucket_bytes);

// Counts one bucket of `bytes` moved by one data collective in `stats` (when not null).
void CountBucket(CollectiveStats* stats, int64_t bytes);

// The bytes one AllGatherV of `items` moves (every rank's pieces, each padded).
int64_t GatheredBytes(absl::Span<const GatherItem> items);

// Gathers one bucket: packs this rank's sends into one uint8 buffer on `device` (its
// pieces of each item at 16-byte aligned offsets), one AllGatherV over `comm` (counted in
// `stats` when not null: a collective, a data collective, a bucket and its bytes), then,
// when `keep`, makes each item's full tensor on its target (zeros first when zero_fill)
// and writes every rank's pieces into it by their runs; fulls[i] receives bucket[i]'s.
// A fulls[i] defined on entry is used as that full tensor instead (the caller's memory,
// of the item's global shape and dtype on its target, already zeroed when zero_fill).
// `device` must be one `comm` serves. With `pinned_staging` (not null), a bucket gathered
// on a GPU with CPU targets (cpu_offload) comes to the host once, into the pinned buffer
// *pinned_staging (cudaHostAlloc'd on the bucket's device, grown when too small, kept
// for the caller's next bucket), and its CPU targets are unpacked from there; without it,
// or when pinned memory cannot be had, each piece is copied from the device on its own.
// Collective over `comm`.
absl::Status GatherBucket(Communicator& comm, absl::Span<GatherItem* const> bucket, Device device,
                          bool keep, absl::Span<Tensor> fulls, CollectiveStats* stats,
                          std::shared_ptr<Storage>* pinned_staging = nullptr);

}  // namespace sdrt::internal

#endif  // SDRT_CORE_DISTRIBUTED_INTERNAL_GATHER_PLAN_H_
