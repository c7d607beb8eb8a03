#include "sdrt/core/distributed/internal/gather_plan.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sdrt/core/distributed/internal/buckets.h"
#include "sdrt/cuda/runtime.h"
#include "sdrt/tensor/sharding/sharding.h"
#include "sdrt/tensor/status_macros.h"

namespace sdrt::internal {
namespace {

// A 0-dim shard costs no bytes in the box message, so its count is bounded apart.
constexpr int64_t kMaxZeroDimShards = int64_t{1} << 16;

// True when rank `q` only holds a copy of what a rank at coordinate 0 holds: its
// coordinate is not 0 on some mesh dim that does not shard (Replicate, or Partial once
// all-reduced).
bool HoldsACopy(const DeviceMesh& mesh, const std::vector<Placement>& placements, int64_t q) {
  const IntVector coord = *mesh.Coordinate(q);
  for (int i = 0; i < mesh.ndim(); ++i) {
    if (!placements[i].is_shard_like() && coord[i] != 0) return true;
  }
  return false;
}

int64_t Numel(IntSpan shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Reads the int64 values of one rank's message; false past the end (never throws).
class Int64Reader {
 public:
  explicit Int64Reader(const std::string& bytes) : bytes_(bytes) {}

  bool Read(int64_t* value) {
    if (bytes_.size() - at_ < sizeof(int64_t)) return false;
    std::memcpy(value, bytes_.data() + at_, sizeof(int64_t));
    at_ += sizeof(int64_t);
    return true;
  }
  bool Read(int64_t n, IntVector* values) {
    if (n < 0 || n > Remaining()) return false;
    values->resize(static_cast<size_t>(n));
    for (int64_t& v : *values) Read(&v);
    return true;
  }
  int64_t Remaining() const {
    return static_cast<int64_t>((bytes_.size() - at_) / sizeof(int64_t));
  }
  bool AtEnd() const { return at_ == bytes_.size(); }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

absl::Status Malformed(absl::string_view op, int q) {
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": rank ", q, " sent a malformed shard box message"));
}

// Reads rank `q`'s part of the box message for `item` into its pieces.
absl::Status ReadBoxes(absl::string_view op, int q, Int64Reader& reader, const GatherItem& item,
                       GatherLayout& layout, StandaloneBoxCheck* standalone, int me) {
  const ShardedTensor& st = *item.sharded;
  int64_t ndim = static_cast<int64_t>(item.global_shape.size());
  if (standalone != nullptr) {
    int64_t dtype = 0, code = 0;
    IntVector shape;
    if (!reader.Read(&dtype) || !reader.Read(&ndim) || !reader.Read(&code) ||
        !reader.Read(ndim, &shape) || dtype < 0 || dtype >= kNumDTypes) {
      return Malformed(op, q);
    }
    if (static_cast<DType>(dtype) != st.dtype() || shape != item.global_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": rank ", q, " has a ShardedTensor of ",
                       DTypeName(static_cast<DType>(dtype)), ShapeToString(shape), ", rank ", me,
                       " one of ", DTypeName(st.dtype()), ShapeToString(item.global_shape)));
    }
    standalone->rank_device_codes[q] = code;
  }
  int64_t shards = 0;
  if (!reader.Read(&shards) || shards < 0 ||
      (ndim > 0 ? shards > reader.Remaining() / (2 * ndim) : shards > kMaxZeroDimShards)) {
    return Malformed(op, q);
  }
  IntVector offsets, sizes;
  for (int64_t k = 0; k < shards; ++k) {
    if (!reader.Read(ndim, &offsets) || !reader.Read(ndim, &sizes)) return Malformed(op, q);
    for (int64_t d = 0; d < ndim; ++d) {
      if (sizes[d] < 0 || offsets[d] < 0 ||
          (sizes[d] > 0 && offsets[d] > item.global_shape[d] - sizes[d])) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": a shard of rank ", q, " at offsets ", ShapeToString(offsets), " with sizes ",
            ShapeToString(sizes), " does not fit in ", ShapeToString(item.global_shape)));
      }
    }
    const int64_t numel = Numel(sizes);
    if (numel == 0) continue;
    SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(item.dtype, numel));
    layout.rank_bytes[q] += AlignUp(bytes);
    layout.pieces.push_back({sizes, BoxRuns(offsets, sizes)});
  }
  layout.piece_begin[q + 1] = layout.pieces.size();
  return absl::OkStatus();
}

// Copies the bytes of `gathered` (a bucket on a GPU) once into pinned host memory, as
// *host, when some item of `bucket` is made on the CPU, so that its pieces are unpacked on
// the host from a single DMA instead of one copy into pageable memory per piece. The
// pinned memory is *pinned_staging, grown (reallocated) when smaller than the bucket and
// kept for the next bucket. Leaves *host undefined when there is nothing to stage (no
// pinned_staging, a CPU bucket, no CPU target) or pinned memory cannot be had (then the
// pieces are copied from the device one by one, as without staging).
absl::Status PinnedHostCopy(const Tensor& gathered, absl::Span<GatherItem* const> bucket,
                            std::shared_ptr<Storage>* pinned_staging, Tensor* host) {
  if (pinned_staging == nullptr || !gathered.device().is_cuda() ||
      std::none_of(bucket.begin(), bucket.end(),
                   [](const GatherItem* item) { return item->target.is_cpu(); })) {
    return absl::OkStatus();
  }
  const int64_t bytes = gathered.nbytes();
  if (*pinned_staging == nullptr || (*pinned_staging)->nbytes() < bytes) {
    pinned_staging->reset();  // the old buffer goes first: both need not fit at once
    absl::StatusOr<std::shared_ptr<Storage>> pinned =
        PinnedHostAllocator::Allocate(bytes, gathered.device().index);
    if (!pinned.ok()) return absl::OkStatus();
    *pinned_staging = *std::move(pinned);
  }
  SDRT_ASSIGN_OR_RETURN(*host, Tensor::FromStorage(*pinned_staging, DType::kUInt8, {bytes}));
  return host->CopyFrom(gathered);
}

}  // namespace

struct GatherLayoutCache::Entry {
  const DeviceMesh* mesh;
  std::vector<Placement> placements;
  IntVector global_shape;
  DType dtype;
  std::shared_ptr<const GatherLayout> layout;
};

GatherLayoutCache::GatherLayoutCache() = default;
GatherLayoutCache::~GatherLayoutCache() = default;

uint64_t HashLayout(const DTensor& dtensor) {
  // FNV-1a over the mesh's address, the global shape and the placements.
  uint64_t h = 0xcbf29ce484222325ULL;
  const auto mix = [&h](uint64_t v) { h = (h ^ v) * 0x100000001b3ULL; };
  mix(reinterpret_cast<uintptr_t>(dtensor.mesh().get()));
  for (int64_t d : dtensor.global_shape()) mix(static_cast<uint64_t>(d));
  for (const Placement& p : dtensor.placements()) {
    mix(static_cast<uint64_t>(p.kind()) << 48 ^ static_cast<uint64_t>(p.dim()) << 32 ^
        static_cast<uint64_t>(p.split_factor()) << 8 ^ static_cast<uint64_t>(p.reduce_op()));
  }
  return h;
}

uint64_t GatherLayoutCache::Key(const DTensor& dtensor) {
  return (HashLayout(dtensor) ^ static_cast<uint64_t>(dtensor.dtype())) * 0x100000001b3ULL;
}

std::shared_ptr<const GatherLayout> GatherLayoutCache::Find(const DTensor& dtensor) const {
  const auto it = entries_.find(Key(dtensor));
  if (it == entries_.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (e.mesh == dtensor.mesh().get() && e.dtype == dtensor.dtype() &&
        e.global_shape == dtensor.global_shape() && e.placements == dtensor.placements()) {
      return e.layout;
    }
  }
  return nullptr;
}

void GatherLayoutCache::Add(const DTensor& dtensor, std::shared_ptr<const GatherLayout> layout) {
  entries_[Key(dtensor)].push_back({dtensor.mesh().get(), dtensor.placements(),
                                    dtensor.global_shape(), dtensor.dtype(), std::move(layout)});
}

absl::StatusOr<GatherItem> MakeDTensorItem(const DTensor& dtensor, const Tensor& local,
                                           int comm_size, int rank, Device target,
                                           GatherLayoutCache* cache) {
  GatherItem item;
  item.dtype = dtensor.dtype();
  item.global_shape = dtensor.global_shape();
  item.target = target;
  if (cache != nullptr) item.layout = cache->Find(dtensor);
  if (item.layout == nullptr) {
    const DeviceMesh& mesh = *dtensor.mesh();
    const std::vector<Placement>& placements = dtensor.placements();
    auto layout = std::make_shared<GatherLayout>();
    layout->piece_begin.assign(static_cast<size_t>(comm_size) + 1, 0);
    layout->rank_bytes.assign(static_cast<size_t>(comm_size), 0);
    layout->pieces.reserve(static_cast<size_t>(comm_size));
    for (int q = 0; q < comm_size; ++q) {
      layout->piece_begin[q + 1] = layout->piece_begin[q];
      if (HoldsACopy(mesh, placements, q)) continue;
      SDRT_ASSIGN_OR_RETURN(LocalShardInfo info, ComputeLocalShapeAndGlobalOffset(
                                                     item.global_shape, mesh, placements, q));
      const int64_t numel = Numel(info.local_shape);
      if (numel == 0) continue;
      SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(item.dtype, numel));
      layout->rank_bytes[q] = AlignUp(bytes);
      ShardRuns runs = OwnedRuns(info);
      layout->pieces.push_back({std::move(info.local_shape), std::move(runs)});
      ++layout->piece_begin[q + 1];
    }
    item.layout = std::move(layout);
    if (cache != nullptr) cache->Add(dtensor, item.layout);
  }
  if (item.layout->rank_bytes[rank] > 0) item.sends.push_back(local);
  return item;
}

GatherItem MakeShardedItem(const ShardedTensor& st, Device target) {
  GatherItem item;
  item.dtype = st.dtype();
  item.global_shape = st.global_shape();
  item.target = target;
  item.zero_fill = true;
  item.sharded = &st;
  for (const LocalShard& shard : st.local_shards()) {
    if (shard.tensor.numel() > 0) item.sends.push_back(shard.tensor);
  }
  return item;
}

absl::Status ExchangeShardBoxes(Communicator& comm, absl::string_view op,
                                absl::Span<GatherItem* const> items, StandaloneBoxCheck* standalone,
                                CollectiveStats* stats) {
  // Per ShardedTensor item: with `standalone` [dtype, ndim, device code, global shape...],
  // then [number of local shards, per shard its offsets..., sizes...] (a 0-dim shard has
  // neither and holds one element).
  std::vector<int64_t> message;
  for (const GatherItem* item : items) {
    if (item->sharded == nullptr) continue;
    const ShardedTensor& st = *item->sharded;
    if (standalone != nullptr) {
      message.push_back(static_cast<int64_t>(st.dtype()));
      message.push_back(static_cast<int64_t>(st.global_shape().size()));
      message.push_back(standalone->device_code);
      message.insert(message.end(), st.global_shape().begin(), st.global_shape().end());
    }
    message.push_back(static_cast<int64_t>(st.local_shards().size()));
    for (const LocalShard& s : st.local_shards()) {
      message.insert(message.end(), s.metadata.offsets.begin(), s.metadata.offsets.end());
      message.insert(message.end(), s.metadata.sizes.begin(), s.metadata.sizes.end());
    }
  }
  std::string bytes(message.size() * sizeof(int64_t), '\0');
  if (!message.empty()) std::memcpy(bytes.data(), message.data(), bytes.size());
  if (stats != nullptr) ++stats->collectives;
  SDRT_ASSIGN_OR_RETURN(const std::vector<std::string> all, comm.AllGatherBytes(bytes));

  const auto size = static_cast<size_t>(comm.size());
  std::vector<std::shared_ptr<GatherLayout>> layouts(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i]->sharded == nullptr) continue;
    layouts[i] = std::make_shared<GatherLayout>();
    layouts[i]->piece_begin.assign(size + 1, 0);
    layouts[i]->rank_bytes.assign(size, 0);
  }
  if (standalone != nullptr) standalone->rank_device_codes.assign(size, 0);
  for (int q = 0; q < comm.size(); ++q) {
    Int64Reader reader(all[q]);
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i]->sharded == nullptr) continue;
      SDRT_RETURN_IF_ERROR(
          ReadBoxes(op, q, reader, *items[i], *layouts[i], standalone, comm.rank()));
    }
    if (!reader.AtEnd()) return Malformed(op, q);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (layouts[i] != nullptr) items[i]->layout = std::move(layouts[i]);
  }
  return absl::OkStatus();
}

std::vector<std::pair<size_t, size_t>> BucketItems(absl::Span<const GatherItem> items,
                                                   int64_t bucket_bytes) {
  std::vector<std::pair<size_t, size_t>> ranges;
  for (size_t begin = 0; begin < items.size();) {
    size_t end = begin;
    int64_t bytes = 0;
    while (end < items.size()) {
      const int64_t item_bytes = GatheredBytes(items.subspan(end, 1));
      if (end > begin && bytes + item_bytes > bucket_bytes) break;
      bytes += item_bytes;
      ++end;
    }
    ranges.emplace_back(begin, end);
    begin = end;
  }
  return ranges;
}

void CountBucket(CollectiveStats* stats, int64_t bytes) {
  if (stats == nullptr) return;
  ++stats->collectives;
  ++stats->data_collectives;
  ++stats->buckets;
  stats->bytes += bytes;
  stats->largest_bucket_bytes = std::max(stats->largest_bucket_bytes, bytes);
}

int64_t GatheredBytes(absl::Span<const GatherItem> items) {
  int64_t bytes = 0;
  for (const GatherItem& item : items) {
    for (int64_t b : item.rank_bytes()) bytes += b;  // padded already
  }
  return bytes;
}

absl::Status GatherBucket(Communicator& comm, absl::Span<GatherItem* const> bucket, Device device,
                          bool keep, absl::Span<Tensor> fulls, CollectiveStats* stats,
                          std::shared_ptr<Storage>* pinned_staging) {
  const int size = comm.size();
  const int me = comm.rank();
  // Rank q's segment holds its pieces of the bucket's items in item order, every piece
  // at a 16-byte aligned offset (each padded to a multiple of 16 bytes, so every rank's
  // segment and every piece in it is aligned, and 16-byte copies apply); item i's part of
  // it starts at offset[i * size + q].
  std::vector<int64_t> offset(bucket.size() * static_cast<size_t>(size));
  std::vector<int64_t> counts(static_cast<size_t>(size), 0);
  for (size_t i = 0; i < bucket.size(); ++i) {
    for (int q = 0; q < size; ++q) {
      offset[i * size + q] = counts[q];
      counts[q] += bucket[i]->rank_bytes()[q];
    }
  }
  std::vector<int64_t> rank_base(static_cast<size_t>(size), 0);
  int64_t total = 0;
  for (int q = 0; q < size; ++q) {
    rank_base[q] = total;
    total += counts[q];
  }
  SDRT_ASSIGN_OR_RETURN(Tensor send, Tensor::Empty({counts[me]}, DType::kUInt8, device));
  for (size_t i = 0; i < bucket.size(); ++i) {
    int64_t at = offset[i * size + me];
    for (const Tensor& t : bucket[i]->sends) {
      if (send.device().is_cpu() && t.device().is_cpu() && t.is_contiguous()) {
        // The common piece: one copy of its bytes, no view made.
        std::memcpy(static_cast<char*>(send.data_ptr()) + at, t.data_ptr(),
                    static_cast<size_t>(t.nbytes()));
        at += AlignUp(t.nbytes());
        continue;
      }
      SDRT_ASSIGN_OR_RETURN(Tensor dst, ByteView(send, at, bucket[i]->dtype, t.shape()));
      SDRT_RETURN_IF_ERROR(dst.CopyFrom(t));
      at += AlignUp(dst.nbytes());
    }
  }
  SDRT_ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({total}, DType::kUInt8, device));
  CountBucket(stats, total);
  SDRT_RETURN_IF_ERROR(comm.AllGatherV(gathered, send, counts));
  if (!keep) return absl::OkStatus();
  Tensor host_gathered;
  SDRT_RETURN_IF_ERROR(PinnedHostCopy(gathered, bucket, pinned_staging, &host_gathered));

  for (size_t i = 0; i < bucket.size(); ++i) {
    const GatherItem& item = *bucket[i];
    const Tensor& source =
        item.target.is_cpu() && host_gathered.defined() ? host_gathered : gathered;
    Tensor full = std::move(fulls[i]);  // the caller's, zeroed when zero_fill
    if (!full.defined() && item.zero_fill) {
      SDRT_ASSIGN_OR_RETURN(full, Tensor::Zeros(item.global_shape, item.dtype, item.target));
    } else if (!full.defined()) {
      SDRT_ASSIGN_OR_RETURN(full, Tensor::Empty(item.global_shape, item.dtype, item.target));
    }
    const IntVector origin(item.global_shape.size(), 0);
    // Host bytes into a host tensor need no view of the piece's slot.
    const bool host = source.device().is_cpu() && full.device().is_cpu() && !IsSubByte(item.dtype);
    for (int q = 0; q < size; ++q) {
      int64_t at = rank_base[q] + offset[i * size + q];
      for (const GatherPiece& piece : item.layout->PiecesOf(q)) {
        SDRT_ASSIGN_OR_RETURN(const int64_t numel, CheckedNumel(piece.shape));
        SDRT_ASSIGN_OR_RETURN(const int64_t bytes, BytesForElements(item.dtype, numel));
        if (host) {
          const PackedBlock slot{static_cast<char*>(source.data_ptr()) + at, piece.shape};
          SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, slot, piece.runs, /*to_local=*/false));
        } else {
          SDRT_ASSIGN_OR_RETURN(const Tensor view, ByteView(source, at, item.dtype, piece.shape));
          SDRT_RETURN_IF_ERROR(CopyRuns(full, origin, view, piece.runs, /*to_local=*/false));
        }
        at += AlignUp(bytes);
      }
    }
    fulls[i] = std::move(full);
  }
  return absl::OkStatus();
}

}  // namespace sdrt::internal
